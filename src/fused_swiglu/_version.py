__version__ = "0.2.0.dev0"  # PEP 440: the changes under "Unreleased" in CHANGELOG.md, after 0.1.0
