"""The GPU path's own pieces: the host pre-flight, the in-container device check, the NCCL weight-sync probe."""
