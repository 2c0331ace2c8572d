# Fixtures live beside the tests that own them: tiny pipeline and model configs, tiny datasets.
pytest_plugins = ["fixtures_model", "fixtures_data", "fixtures_serving"]
