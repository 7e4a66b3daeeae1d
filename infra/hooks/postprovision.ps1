# azd postprovision hook (Windows): the same three steps as postprovision.sh.
#   1. search index + sample documents; 2. SQL schema + sample data; 3. read-only DB user for the app.
$ErrorActionPreference = 'Stop'
Set-Location (Join-Path $PSScriptRoot '..' '..')

if (-not $env:AZURE_SQL_SERVER -and (Get-Command azd -ErrorAction SilentlyContinue)) {
    foreach ($line in (azd env get-values)) {
        if ($line -match '^([A-Za-z_][A-Za-z0-9_]*)="?(.*?)"?$') { Set-Item -Path "env:$($Matches[1])" -Value $Matches[2] }
    }
}

$required = 'AZURE_RESOURCE_GROUP', 'AZURE_SEARCH_ENDPOINT', 'AZURE_SEARCH_INDEX', 'AZURE_OPENAI_ENDPOINT',
    'AZURE_OPENAI_EMBEDDING_DEPLOYMENT', 'AZURE_SQL_SERVER', 'AZURE_SQL_SERVER_NAME', 'AZURE_SQL_DATABASE',
    'AZURE_SQL_READER_SCHEMA', 'APP_IDENTITY_NAME', 'APP_IDENTITY_PRINCIPAL_ID'
foreach ($name in $required) {
    if (-not [Environment]::GetEnvironmentVariable($name)) { throw "postprovision: $name is not set; run 'azd provision' first" }
}
foreach ($path in 'data/sql/schema.tsql.sql', 'data/sql/data.sql', 'data/docs', 'data/catalog.json') {
    if (-not (Test-Path $path)) { throw "postprovision: $path is missing" }
}

$python = if (Test-Path '.venv/Scripts/python.exe') { '.venv/Scripts/python.exe' } else {
    Write-Host 'postprovision: creating .venv with requirements.txt'
    python -m venv .venv
    & .venv/Scripts/python.exe -m pip install -q --disable-pip-version-check -r requirements.txt
    '.venv/Scripts/python.exe'
}

Write-Host "postprovision: 1/3 search index '$env:AZURE_SEARCH_INDEX' and documents from data/docs"
$env:SEARCH_PROVIDER = 'azure'
$env:LLM_PROVIDER = 'azure_openai'
& $python -m shared.ingest data/docs --target azure
if ($LASTEXITCODE -ne 0) { throw 'postprovision: ingestion failed' }

if (-not (Get-Command sqlcmd -ErrorAction SilentlyContinue)) { throw 'postprovision: sqlcmd (go-sqlcmd) is required: https://aka.ms/go-sqlcmd' }
if (Get-Command az -ErrorAction SilentlyContinue) {
    $ip = (Invoke-RestMethod -Uri 'https://api.ipify.org').Trim()
    Write-Host "postprovision: allowing $ip through the SQL firewall"
    az sql server firewall-rule create --resource-group $env:AZURE_RESOURCE_GROUP --server $env:AZURE_SQL_SERVER_NAME `
        --name azd-postprovision-client --start-ip-address $ip --end-ip-address $ip --output none
}

function Invoke-Sql([string]$file) {
    sqlcmd -S "tcp:$($env:AZURE_SQL_SERVER),1433" -d $env:AZURE_SQL_DATABASE --authentication-method ActiveDirectoryDefault -b -i $file
    if ($LASTEXITCODE -ne 0) { throw "postprovision: sqlcmd failed on $file" }
}

Write-Host "postprovision: 2/3 SQL schema and sample data in $env:AZURE_SQL_DATABASE"
Invoke-Sql 'data/sql/schema.tsql.sql'
Invoke-Sql 'data/sql/data.sql'

Write-Host "postprovision: 3/3 read-only database user for $env:APP_IDENTITY_NAME"
$grants = New-TemporaryFile
try {
    & $python infra/hooks/sql_grants.py --user $env:APP_IDENTITY_NAME --object-id $env:APP_IDENTITY_PRINCIPAL_ID `
        --schema $env:AZURE_SQL_READER_SCHEMA --catalog data/catalog.json | Set-Content -Encoding utf8 $grants
    if ($LASTEXITCODE -ne 0) { throw 'postprovision: could not build the grant script' }
    Invoke-Sql $grants.FullName
} finally {
    Remove-Item $grants -ErrorAction SilentlyContinue
}
Write-Host 'postprovision: done. Workbook: Azure portal > resource group > Application Insights > Workbooks > Durable AI Jobs'
