"""Tier prices from gpuhunt's catalog (runners.prices): catalog -> cards -> refresh, which edits tier_files."""
