"""Code that runs in the gateway pods, not in the operator: ``launch.py`` and its ``gwop_*.py``
modules ship in each GatewayDeployment's ConfigMap (render.pod_code), mounted as one directory, and
start the gateway there. They import each other by their flat names (the directory is
``sys.path[0]`` of ``python3 launch.py``) and nothing of the operator (the pods have only the
gateway's packages). The names they share with the operator are declared once, in
``gwop_contract`` (standard library only), which the operator imports as
``gateway_operator.pod.gwop_contract`` (tests/unit/test_contract.py)."""
