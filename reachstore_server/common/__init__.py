"""Code every reachstore service shares: errors, gRPC bootstrap, config, logging."""
