"""Test doubles for the one part that cannot be real where tests run: the GPU."""
