# The root conftest only registers the plugin: every option, fixture and hook lives in
# audit_harness/pytest_plugin.py so that `pip install` users get the same behaviour.
pytest_plugins = ["audit_harness.pytest_plugin"]
