// Durable Task Scheduler backend (used when durableBackend is durableTaskScheduler): a scheduler, one
// task hub, and Durable Task Data Contributor for the app identity (and the deployer, for the dashboard).
param name string
param location string
param tags object
param taskHubName string
param appPrincipalId string
param deployerPrincipalId string
param deployerPrincipalType string

@allowed([
  'Consumption'
  'Dedicated'
])
param skuName string = 'Consumption'

// Built-in role: Durable Task Data Contributor (the role Durable Functions apps need on the scheduler).
var durableTaskDataContributorRoleId = '0ad04412-c4d5-4796-b79c-f76d14c8d402'

resource scheduler 'Microsoft.DurableTask/schedulers@2025-11-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    sku: {
      name: skuName
    }
    // An empty allow-list denies all traffic; access is still gated by Entra RBAC.
    ipAllowlist: [
      '0.0.0.0/0'
    ]
  }
}

resource taskHub 'Microsoft.DurableTask/schedulers/taskHubs@2025-11-01' = {
  parent: scheduler
  name: taskHubName
}

resource appDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(scheduler.id, appPrincipalId, durableTaskDataContributorRoleId)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributorRoleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource deployerDataContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(scheduler.id, deployerPrincipalId, durableTaskDataContributorRoleId)
  scope: scheduler
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', durableTaskDataContributorRoleId)
    principalId: deployerPrincipalId
    principalType: deployerPrincipalType
  }
}

output endpoint string = scheduler.properties.endpoint
output taskHubName string = taskHub.name
