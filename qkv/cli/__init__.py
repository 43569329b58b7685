"""The ``qkv`` command: parses arguments and calls library functions, nothing more."""
