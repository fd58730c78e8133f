"""The top-level keys of a snapshot, in the order ``encode_snapshot`` writes them: the
stored format the snapshot tests hold the code to (written out here, not read from it)."""

SNAPSHOT_KEYS = [
    "version",
    "state",
    "is_running",
    "workers",
    "stream_seq",
    "work_item_seq",
    "invocation_seq",
    "deliveries",
    "streams",
    "collection_release_states",
    "elapsed_alive",
    "last_alive_stamp",
    "journal_seq",
]
