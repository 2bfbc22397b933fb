from gpuhost_testinfra import host, pytest_generate_tests  # noqa: F401  pylint: disable=unused-import
