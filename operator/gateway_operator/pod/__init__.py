"""Code that runs in the gateway pods, not in the operator: ``launch.py`` and its ``gwop_*.py``
modules ship in each GatewayDeployment's ConfigMap (render.pod_code), mounted as one directory, and
start the gateway there. They import each other by their flat names (the directory is
``sys.path[0]`` of ``python3 launch.py``) and nothing of the operator (the pods have only the
gateway's packages); the names they share with the operator are tied by tests (tests/unit)."""
