"""The loop: kopf's wiring (handlers), one task per GatewayDeployment (supervisor, controller),
a pass's steps (reconcile, steps, inputs), the one summarize-and-patch (publish), and the guards
around them (leader, watch_liveness, metrics)."""
