// Azure SQL with Microsoft Entra-only authentication: no SQL logins or passwords exist. The deployer is
// the Entra admin; the postprovision hook creates a contained user for the app identity with SELECT on
// one schema.
param serverName string
param databaseName string
param location string
param tags object
param adminPrincipalId string
param adminPrincipalType string
param adminLogin string
param databaseSku object
param logAnalyticsWorkspaceId string

resource server 'Microsoft.Sql/servers@2023-08-01-preview' = {
  // checkov:skip=CKV_AZURE_113: Public endpoint on purpose (no VNet in this template: Flex workers reach it over the public endpoint; every caller needs an Entra token (local/key auth is disabled)); Entra-only auth and the firewall (Azure services + the deployer's IP) gate it.
  name: serverName
  location: location
  tags: tags
  properties: {
    minimalTlsVersion: '1.2'
    publicNetworkAccess: 'Enabled'
    administrators: {
      administratorType: 'ActiveDirectory'
      azureADOnlyAuthentication: true
      login: adminLogin
      sid: adminPrincipalId
      tenantId: tenant().tenantId
      principalType: adminPrincipalType
    }
  }
}

// 0.0.0.0 is the documented marker for "Azure services": it lets the Flex workers (no VNet) connect.
resource allowAzureServices 'Microsoft.Sql/servers/firewallRules@2023-08-01-preview' = {
  parent: server
  name: 'AllowAllWindowsAzureIps'
  properties: {
    startIpAddress: '0.0.0.0'
    endIpAddress: '0.0.0.0'
  }
}

resource database 'Microsoft.Sql/servers/databases@2023-08-01-preview' = {
  // checkov:skip=CKV_AZURE_26: Defender alerts go to the Entra admin (emailAccountAdmins); no fixed mailbox exists per environment.
  // checkov:skip=CKV_AZURE_27: emailAccountAdmins is true on databaseThreatDetection below; this check only reads nested ARM resources.
  // checkov:skip=CKV_AZURE_229: Serverless single database without zone redundancy keeps the sample affordable.
  parent: server
  name: databaseName
  location: location
  tags: tags
  sku: databaseSku
  properties: {
    autoPauseDelay: 60
    minCapacity: json('0.5')
    zoneRedundant: false
  }
}

resource auditing 'Microsoft.Sql/servers/auditingSettings@2023-08-01-preview' = {
  parent: server
  name: 'default'
  // The Azure Monitor target needs the master diagnostic setting in place first.
  dependsOn: [
    masterAuditDiagnostics
  ]
  properties: {
    state: 'Enabled'
    isAzureMonitorTargetEnabled: true
    retentionDays: 90
  }
}

// Microsoft Defender for SQL (Advanced Threat Protection) for every database of the server; billed per server.
resource threatDetection 'Microsoft.Sql/servers/securityAlertPolicies@2023-08-01-preview' = {
  parent: server
  name: 'Default'
  properties: {
    state: 'Enabled'
    emailAccountAdmins: true
  }
}

// Server audit records reach Log Analytics through a diagnostic setting on the system master database.
// The provider-path form avoids declaring master as a database resource of this template.
resource masterAuditDiagnostics 'Microsoft.Sql/servers/databases/providers/diagnosticSettings@2021-05-01-preview' = {
  name: '${server.name}/master/Microsoft.Insights/audit-to-log-analytics'
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'SQLSecurityAuditEvents'
        enabled: true
      }
    ]
  }
}

// checkov's Bicep graph checks want auditing and threat detection attached to each database too (its
// inline skips do not reach graph checks). Both go to the same workspace; server-level auditing already
// covers this database, so its audit rows appear twice there: a small price on a sample database.
resource databaseAuditing 'Microsoft.Sql/servers/databases/auditingSettings@2023-08-01-preview' = {
  parent: database
  name: 'default'
  properties: {
    state: 'Enabled'
    isAzureMonitorTargetEnabled: true
    retentionDays: 90
  }
}

resource databaseAuditDiagnostics 'Microsoft.Insights/diagnosticSettings@2021-05-01-preview' = {
  name: 'audit-to-log-analytics'
  scope: database
  properties: {
    workspaceId: logAnalyticsWorkspaceId
    logs: [
      {
        category: 'SQLSecurityAuditEvents'
        enabled: true
      }
    ]
  }
}

resource databaseThreatDetection 'Microsoft.Sql/servers/databases/securityAlertPolicies@2023-08-01-preview' = {
  parent: database
  name: 'Default'
  properties: {
    state: 'Enabled'
    emailAccountAdmins: true
  }
}

output serverName string = server.name
output serverFqdn string = server.properties.fullyQualifiedDomainName
output databaseName string = database.name
