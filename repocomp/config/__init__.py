"""The settings: their schema (`schema`), where the user's files are (`paths`), what a repository may set
(`trust`) and how a configuration is read from TOML and checked (`loading`)."""
