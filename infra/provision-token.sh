#!/usr/bin/env bash
# Provision an API token for a tenant of a deployed qunfa stack.
#
#   infra/provision-token.sh STACK TENANT [TOKEN]
#
# Prefer the API: the platform token creates a tenant's tokens with
# POST /v1/tenants/{tenant}/tokens (docs/deploy.md). This script is for a
# stack whose API is not reachable yet.
#
# Generates a token (unless TOKEN is given) and stores only its SHA-256
# (hex, as api.HashToken does) as an admin token of the tenant: the
# tenant's listing record (TENANT#<tenant> / TOKEN#<id>, so the tenant sees
# and can revoke it), then the token record (TOKEN#<hash>), each only if
# new — a hash already bound is never rebound to another tenant. Prints the
# token once: hand it to the tenant, it cannot be read back. Needs the aws
# CLI with credentials allowed dynamodb:PutItem on the table and
# cloudformation:DescribeStacks. AWS_ENDPOINT_URL works for LocalStack.
# QUNFA_DRY_RUN=1 prints the two items, one per line, instead of writing
# them (TABLE may then be given in the environment instead of looked up).
set -euo pipefail

if [[ $# -lt 2 || $# -gt 3 ]]; then
  echo "usage: $0 STACK TENANT [TOKEN]" >&2
  exit 2
fi
stack=$1 tenant=$2 token=${3:-}
if [[ -z "$token" ]]; then
  token="qf_$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')"
fi
if [[ ! "$tenant" =~ ^[A-Za-z0-9._-]{1,128}$ ]]; then
  echo "tenant must be 1-128 letters, digits, '.', '_' or '-'" >&2
  exit 2
fi
hash=$(printf '%s' "$token" | sha256sum | cut -d' ' -f1)
id="tok_${hash:0:16}"
now=$(date +%s%N)
fields=$(printf '"tenant":{"S":"%s"},"id":{"S":"%s"},"name":{"S":"provisioned"},"role":{"S":"admin"},"hash":{"S":"%s"},"created":{"N":"%s"},"expires":{"N":"0"}' \
  "$tenant" "$id" "$hash" "$now")
listing=$(printf '{"pk":{"S":"TENANT#%s"},"sk":{"S":"TOKEN#%s"},%s}' "$tenant" "$id" "$fields")
item=$(printf '{"pk":{"S":"TOKEN#%s"},"sk":{"S":"_"},%s}' "$hash" "$fields")

if [[ "${QUNFA_DRY_RUN:-}" == 1 ]]; then
  printf '%s\n%s\n' "$listing" "$item"
  exit 0
fi
table=${TABLE:-$(aws cloudformation describe-stacks --stack-name "$stack" \
  --query "Stacks[0].Outputs[?OutputKey=='TableName'].OutputValue" --output text)}
if [[ -z "$table" || "$table" == None ]]; then
  echo "stack $stack has no TableName output" >&2
  exit 1
fi
for rec in "$listing" "$item"; do
  if ! aws dynamodb put-item --table-name "$table" --item "$rec" --condition-expression 'attribute_not_exists(pk)'; then
    echo "not stored: the token (or its id) exists already; a token is never rebound to another tenant" >&2
    exit 1
  fi
done
echo "tenant $tenant: token stored (hashed) in $table" >&2
printf '%s\n' "$token"
