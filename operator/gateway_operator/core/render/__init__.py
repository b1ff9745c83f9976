"""What should exist for one GatewayDeployment: pure functions from the spec to manifests, one
module per kind of object. Nothing here talks to the API server or reads a file: ``reconcile``
applies what these return, and the pods' code (``gateway_operator.pod.pod_code``) is an input.

- ``objects``: ``desired_objects``, everything in apply order;
- ``gateway_config``: the gateway.yaml the replicas run, and the ConfigMap that carries it;
- ``deployment``: the gateway's Deployment (its container, volumes) and its state claim;
- ``network``: the Service, Ingress, HTTPRoute and the gateway's NetworkPolicy;
- ``autoscaling``: the HorizontalPodAutoscaler, the PodMonitor and the PodDisruptionBudget;
- ``managed_redis``: an operator-managed Redis (Deployment, Service, NetworkPolicy, claim);
- ``secrets``: the Secrets the operator generates once;
- ``names``: the owner, the operator's identity, the names of what is rendered;
- ``manifest``: the metadata every object carries, and the fingerprints.
"""
