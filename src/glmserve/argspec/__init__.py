"""SGLang's launch flags per release, and argparse's verdict on an argv without sglang.

A spec is the JSON dump of ``ServerArgs.add_cli_args`` for one release. The modules, in the
order they depend on each other:

- ``dump_program``: the program that prints a spec; run as source text by a host's python
  (stdlib only, never imports glmserve).
- ``model``: a spec once read (``ArgSpec``, ``ArgAction``), the verdict (``FlagIssue``,
  ``ValidationReport``) and ``parse_argspec``.
- ``releases``: the shipped specs (``data/``: index plus content-addressed specs), release
  numbers, and loading a spec by version or path.
- ``host_dump``: a host's live spec (the command that runs ``dump_program`` and its output).
- ``value_checks``, ``suggestions``, ``backend_facts``: what ``emulator`` builds on: type
  conversion and choices, cross-release suggestions (renames), attention-backend pitfalls.
- ``emulator``: ``validate_argv``, argparse's accept/reject re-implemented, every problem
  listed at once with a suggested fix.
- ``launch_script``: the launch command inside a hand-written shell script, read as bash.
- ``portable``: a profile's flags spelled for a target release (``data/translations.json``).
- ``validation``: a profile's argv checked against a release, runtime patches included.

No names are re-exported here: import from the module that holds them.
"""
