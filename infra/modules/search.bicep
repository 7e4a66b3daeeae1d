// Azure AI Search with Entra-only data-plane auth. The app reads (Search Index Data Reader); only the
// deployer, who runs ingestion in the postprovision hook, may create indexes and upload documents.
param name string
param location string
param tags object
param sku string

@allowed([
  'disabled'
  'free'
  'standard'
])
param semanticRanker string
param appPrincipalId string
param deployerPrincipalId string
param deployerPrincipalType string

// Built-in roles.
var searchIndexDataReaderRoleId = '1407120a-92aa-4202-b7e9-c0e197c71c8f'
var searchIndexDataContributorRoleId = '8ebe5a00-799e-43f5-93ac-243d3dce84a7'
var searchServiceContributorRoleId = '7ca78c08-252a-4471-8644-bb5ff32d4ba0'

resource search 'Microsoft.Search/searchServices@2024-06-01-preview' = {
  // checkov:skip=CKV_AZURE_208: One replica keeps a per-environment sample affordable; raise replicaCount to 3 for the index-update SLA.
  // checkov:skip=CKV_AZURE_209: One replica keeps a per-environment sample affordable; raise replicaCount to 2 for the query SLA.
  name: name
  location: location
  tags: tags
  sku: {
    name: sku
  }
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    replicaCount: 1
    partitionCount: 1
    hostingMode: 'default'
    disableLocalAuth: true
    publicNetworkAccess: 'enabled'
    semanticSearch: semanticRanker
  }
}

resource appIndexReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(search.id, appPrincipalId, searchIndexDataReaderRoleId)
  scope: search
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', searchIndexDataReaderRoleId)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource deployerIndexContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(search.id, deployerPrincipalId, searchIndexDataContributorRoleId)
  scope: search
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', searchIndexDataContributorRoleId)
    principalId: deployerPrincipalId
    principalType: deployerPrincipalType
  }
}

resource deployerServiceContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (!empty(deployerPrincipalId)) {
  name: guid(search.id, deployerPrincipalId, searchServiceContributorRoleId)
  scope: search
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', searchServiceContributorRoleId)
    principalId: deployerPrincipalId
    principalType: deployerPrincipalType
  }
}

output endpoint string = 'https://${search.name}.search.windows.net'
output name string = search.name
