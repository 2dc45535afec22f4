"""The documentation: links, topics and the commands its pages show."""
