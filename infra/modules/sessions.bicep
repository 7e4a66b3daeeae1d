// Azure Container Apps dynamic sessions: a code interpreter session pool (PythonLTS, Hyper-V isolated sessions)
// where run_python steps run model-written code (shared/sandbox/azure_sessions.py). One session per job, allocated
// on first use and freed after the cooldown. Sessions have no outbound network. The app's identity may execute
// code in the pool (Azure ContainerApps Session Executor) and nothing else; the pool needs no environment of ours.
param name string
param location string
param tags object
param appPrincipalId string

@minValue(1)
@maxValue(600)
@description('Sessions (jobs running code) at once.')
param maxConcurrentSessions int = 20

@minValue(300)
@description('Seconds an idle session is kept (and billed) after its last call.')
param cooldownPeriodInSeconds int = 300

// Built-in role: Azure ContainerApps Session Executor (run code and manage files in the pool's sessions).
var sessionExecutorRoleId = '0fb8eba5-a2bb-4abe-b1c1-49dfad359bb0'

resource pool 'Microsoft.App/sessionPools@2024-02-02-preview' = {
  name: name
  location: location
  tags: tags
  properties: {
    poolManagementType: 'Dynamic'
    containerType: 'PythonLTS'
    scaleConfiguration: {
      maxConcurrentSessions: maxConcurrentSessions
    }
    dynamicPoolConfiguration: {
      executionType: 'Timed'
      cooldownPeriodInSeconds: cooldownPeriodInSeconds
    }
    sessionNetworkConfiguration: {
      status: 'EgressDisabled'
    }
  }
}

resource appSessionExecutor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(pool.id, appPrincipalId, sessionExecutorRoleId)
  scope: pool
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', sessionExecutorRoleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output poolManagementEndpoint string = pool.properties.poolManagementEndpoint
output name string = pool.name
