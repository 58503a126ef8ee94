"""tierbench's Hydra launcher plugin (Hydra loads launchers only from the `hydra_plugins` namespace)."""
