"""The release string, in a module of its own so the layers below the package face can read it.

Kept equal to ``version`` in ``pyproject.toml`` (``tests/unit/test_public_api.py`` compares them).
"""

__version__ = "0.1.0"
