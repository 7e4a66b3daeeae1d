"""Work run by external workers over the gRPC sidecar protocol (``devhost.durable.sidecar``).

- ``workers``: ``ExternalWorkers``, the queues of episodes, activities and entity batches offered to workers.
- ``orchestrations``: ``RemoteEpisodes``, remote instances' episodes and activities, and the workers' answers.
- ``entities``: ``RemoteEntities``, entity batches run by workers, and the critical sections of entity locks.
"""
