"""The storage emulation: Azurite on loopback, storage connections, queue and blob triggers, storage bindings."""
