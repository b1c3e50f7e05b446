#!/usr/bin/env bash
# Provision an API token for a tenant of a deployed qunfa stack.
#
#   infra/provision-token.sh STACK TENANT [TOKEN]
#
# Generates a token (unless TOKEN is given), stores only its SHA-256 (hex,
# as api.HashToken does) in the stack's table under TOKEN#<hash>, and
# prints the token once: hand it to the tenant, it cannot be read back.
# Needs the aws CLI with credentials allowed dynamodb:PutItem on the table
# and cloudformation:DescribeStacks. AWS_ENDPOINT_URL works for LocalStack.
# QUNFA_DRY_RUN=1 prints the item instead of writing it (TABLE may then
# be given in the environment instead of looked up).
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
item=$(printf '{"pk":{"S":"TOKEN#%s"},"sk":{"S":"_"},"tenant":{"S":"%s"}}' "$hash" "$tenant")

if [[ "${QUNFA_DRY_RUN:-}" == 1 ]]; then
  printf '%s\n' "$item"
  exit 0
fi
table=${TABLE:-$(aws cloudformation describe-stacks --stack-name "$stack" \
  --query "Stacks[0].Outputs[?OutputKey=='TableName'].OutputValue" --output text)}
if [[ -z "$table" || "$table" == None ]]; then
  echo "stack $stack has no TableName output" >&2
  exit 1
fi
aws dynamodb put-item --table-name "$table" --item "$item"
echo "tenant $tenant: token stored (hashed) in $table" >&2
printf '%s\n' "$token"
