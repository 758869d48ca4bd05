"""Namespace shards: which query process holds which namespaces (docs/SHARDS.md).

``placement.py`` is the pure rule (rendezvous hashing with R replicas), ``membership.py``
the live members in the shared database and the signatures of forwarded searches,
``router.py`` the searches sent to another member, ``ownership.py`` what this member loads
and drops as members come and go.
"""
