"""Config: the Hydra tree composed against typed schemas, then validated, before anything starts."""
