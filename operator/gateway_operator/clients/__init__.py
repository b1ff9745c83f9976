"""The I/O to the world outside the process: the API server (kube, apply), the replicas' health
(health_poll, health_watch) and Redis (redis_probe, made of redis_guard, redis_connection,
redis_protocol and resp). Each bounds what it reads and how long it waits; what an answer means
is the core's."""
