"""The serialization layer: how events, snapshots and journal records become data.

It sits just above the plain data types (``events``, ``errors``, ``runtime.types``) and
below everything that stores or restores a run: the journal stores, the runtime and the
``Context``.  Modules:

* ``serializers``: ``JsonSerializer`` and ``PickleSerializer`` (the
  public path is ``tickwork.context.serializers``);
* ``snapshot`` and ``snapshot_decode``: the
  snapshot format (api.md §10.3), written and read;
* ``journal_codec``: ticks as journal records, and back;
* ``requirements``: ``wait_for_event`` requirements in both.

The field codecs that ``tickwork.events`` is built on live below it, in
``tickwork._serde_fields``.
"""
