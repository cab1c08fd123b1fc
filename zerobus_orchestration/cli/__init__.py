"""``zerobus-orch``, the command line: ``main`` holds the commands, the rest their pieces.

Empty on purpose: the console script is ``zerobus_orchestration.cli.main:main``.
"""
