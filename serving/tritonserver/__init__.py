"""What every backend running a `tritonserver` shares: finding or making runnable the node's server
(`installation`), what the node offers (`facts`), and one server process (`server`)."""
