"""Where documents come from: the source interface (`base`), its implementations (a folder, a git
ref, a web site) and the registry that finds third-party connectors through an entry point."""
