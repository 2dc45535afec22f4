"""How a Nomad agent turns an agent file into a plugin's SetConfig bytes, step by step.

For the tools that give the agent's answer before any agent sees a file (the
launcher, the conformance suite, test helpers); a plugin never imports it. The
modules follow the agent's path (``docs/architecture.md`` has the table):
HCL 1, plugin blocks, hcldec, templates, the whole path (:mod:`.setconfig`).

**Scope is frozen.** It agrees with Nomad v2.0.5 on every config the Go
cross-check compares, and declines, saying why, what it cannot give exactly
(512-bit rounding, splats, ``for``, directives, Unicode case tables, inputs
past its limits). What it declines today it keeps declining; it gets no
further fidelity work unless an operator's real config needs it.
"""
