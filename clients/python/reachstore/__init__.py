"""reachstore Python SDK (filled in below the generated protobuf packages)."""
