"""Installing tierbench on nodes that cannot reach a package index: a wheelhouse (every wheel a target node needs,
resolved by pip for that node's Python and platform, with a lock) built on a machine that can, carried over in
parts where the transport limits size, installed with `pip install --no-index --find-links`."""
