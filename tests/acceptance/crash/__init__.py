"""Helpers of the SIGKILL acceptance test: the app under test and its worker subprocess."""
