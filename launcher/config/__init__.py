"""Config: the schema, composing recipes and overrides, the config files, reading a checkpoint's config.json."""
