-- Argo CD resource health check for gateway-operator.dev/GatewayDeployment.
-- Install: the argocd-cm key resource.customizations.health.gateway-operator.dev_GatewayDeployment
-- (docs/operations.md, "Readiness: kubectl wait, helm --wait, Argo CD"). It reads the resource the way
-- kstatus does (helm --wait, Flux):
--   no status yet, or status.observedGeneration < metadata.generation -> Progressing
--   Stalled=True     -> Degraded     (the operator cannot act until the spec or a Secret changes)
--   Reconciling=True -> Progressing  (rolling out, or scale-out waiting for Redis)
--   Ready=True       -> Healthy
--   otherwise        -> Progressing  (replicas not ready yet)
-- The message is the deciding condition's "<reason>: <message>".
local hs = {status = "Progressing", message = "waiting for the gateway-operator to report status"}
local status = obj.status
if status == nil or status.conditions == nil then
  return hs
end
local generation = obj.metadata.generation or 0
local observed = status.observedGeneration or 0
if observed < generation then
  hs.message = string.format("waiting for the gateway-operator to observe generation %d (observed: %d)",
    generation, observed)
  return hs
end
local found = {}
for _, condition in ipairs(status.conditions) do
  found[condition.type] = condition
end
local function said(condition)
  return (condition.reason or "") .. ": " .. (condition.message or "")
end
local stalled, reconciling, ready = found["Stalled"], found["Reconciling"], found["Ready"]
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = said(stalled)
elseif reconciling ~= nil and reconciling.status == "True" then
  hs.message = said(reconciling)
elseif ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = said(ready)
elseif ready ~= nil then
  hs.message = said(ready)
end
return hs
