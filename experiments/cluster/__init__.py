"""Cluster: reach Ray, check every tier has a node, hold one for the tier job, place servers and clients."""
