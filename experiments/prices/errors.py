"""The error of bad input to the price refresh, one class for the catalog, the tier files and the refresh alike, so
that runners.prices catches one."""


class PriceRefreshError(ValueError):
    """Bad input to the refresh: the message names the flag (or file), the value and the fix."""
