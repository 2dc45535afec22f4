"""How a Nomad agent turns an operator's agent file into a plugin's SetConfig bytes.

A plugin never needs this package: it receives cty msgpack (:mod:`nomad_device.wire`)
and decodes it against its own schema. The launcher, the conformance suite and
test helpers need it, to give the agent's answer for an agent file before any
agent sees it. The path, one module a step:

- :mod:`~nomad_device.agentconfig.hcl1` -- HCL 1, the agent file's syntax (native
  and JSON), and :mod:`~nomad_device.agentconfig.hclsyntax`, its errors explained;
- :mod:`~nomad_device.agentconfig.agentfile` -- HCL 1's decoding of ``plugin``
  blocks into Go values, written as the JSON the agent hands on;
- :mod:`~nomad_device.agentconfig.hcldec` -- hcldec's decoding of that JSON body
  against the plugin's schema, its panics included; strings are templates
  (:mod:`~nomad_device.agentconfig.hcltemplate`, the 15 functions in
  :mod:`~nomad_device.agentconfig.ctyfuncs`, go-cty's conversions in
  :mod:`~nomad_device.agentconfig.ctyconvert`);
- :mod:`~nomad_device.agentconfig.setconfig` -- the whole path, file to bytes,
  ending as the agent's would: accepted, refused, or with the agent crashing;
  :mod:`~nomad_device.agentconfig.defaults` -- the same as exceptions, for tests;
- :mod:`~nomad_device.agentconfig.schemasafety` -- schemas that let a config
  crash the agent, with an agent file that does.

**Scope is frozen.** The emulator agrees with Nomad v2.0.5 on every config the
Go cross-check compares (``tests/interop/test_agent_config_crosscheck.py``) and
declines, saying why, what it cannot give exactly: arithmetic that go-cty
rounds in 512-bit binary, ``%`` of fractions, splats, ``for`` expressions,
template directives, case mappings that need Unicode tables Python lacks, and
inputs past its size limits. What it declines today it keeps declining; no
further fidelity work is done unless an operator's real config needs it.

Modules are imported on use; this package imports none of them.
"""
