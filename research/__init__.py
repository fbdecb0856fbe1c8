"""Research wings: each study's scripts, tests, figures and report, apart from the library."""
