"""Code that runs in the gateway pods, not in the operator: ``launcher.py`` ships in each
GatewayDeployment's ConfigMap (render.launcher_text) and starts the gateway there. It imports
nothing of the operator (the pods have only the gateway's packages); the names it shares with
the operator are tied by tests (tests/unit: the launcher's constants and the API's)."""
