#!/usr/bin/env bash
# A user's first contact with S3, set up the way a user does it:
# moto_server with INITIAL_NO_AUTH_ACTION_COUNT=6 (authentication on after the
# set-up calls), users and keys made with the aws CLI, credentials from the
# environment. `strata backups ls` below prefixes, and the signature refusals
# that must stay refusals. Usage: s3_recipe_test.sh BUILD_DIR
set -euo pipefail
strata="${1:?usage: s3_recipe_test.sh BUILD_DIR}/strata"
# moto_server and aws from the project's Python environment (scripts/python-env.sh).
export PATH="${STRATA_VENV:-$(cd "$(dirname "$0")/../.." && pwd)/.venv}/bin:$PATH"
for tool in moto_server aws curl; do
  command -v "$tool" >/dev/null || { echo "FAIL: $tool not found"; exit 1; }
done
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log=$(mktemp)
INITIAL_NO_AUTH_ACTION_COUNT=6 setsid moto_server -H 127.0.0.1 -p "$port" >"$log" 2>&1 &
moto=$!
cleanup() {
  local rc=$?
  kill -9 -- -"$moto" 2>/dev/null || kill -9 "$moto" 2>/dev/null
  wait "$moto" 2>/dev/null || true
  rm -f "$log"
  exit "$rc"
}
trap cleanup EXIT
export AWS_ENDPOINT_URL=http://127.0.0.1:$port AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
export AWS_ACCESS_KEY_ID=setup AWS_SECRET_ACCESS_KEY=setup
export AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null
for _ in $(seq 150); do curl -s "$AWS_ENDPOINT_URL" >/dev/null && break; sleep 0.2; done  # probe (counts as 1)
aws iam create-user --user-name strata >/dev/null
read -r AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY < <(aws iam create-access-key --user-name strata \
    --output text --query 'AccessKey.[AccessKeyId,SecretAccessKey]')
aws iam put-user-policy --user-name strata --policy-name all --policy-document \
  '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'
aws iam create-user --user-name nobody >/dev/null
read -r DENIED_KEY DENIED_SECRET < <(aws iam create-access-key --user-name nobody \
    --output text --query 'AccessKey.[AccessKeyId,SecretAccessKey]')
export AWS_ACCESS_KEY_ID AWS_SECRET_ACCESS_KEY
aws s3 mb s3://my-bucket >/dev/null

passed=0 failed=0
check() {  # check NAME WANT_RC CMD...: the command's exit code must be WANT_RC
  local name=$1 want=$2 out rc
  shift 2
  out=$("$@" 2>&1) && rc=0 || rc=$?
  if [ "$rc" = "$want" ]; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $name: exit $rc, want $want: $out"
  fi
}
for url in s3://my-bucket s3://my-bucket/job s3://my-bucket/a/b/c s3://my-bucket/job_1-x.y \
           "s3://my-bucket/sp ace/é=+~"; do
  check "backups ls $url" 0 "$strata" backups ls "$url"
  check "backups ls --json $url" 0 "$strata" backups ls "$url" --json
done
check "prune dry run below a prefix" 0 "$strata" prune s3://my-bucket/a/b/c --hourly 1
# Still refused: a wrong secret, and a user without a policy.
check "a wrong secret" 1 env AWS_SECRET_ACCESS_KEY="x$AWS_SECRET_ACCESS_KEY" \
  "$strata" backups ls s3://my-bucket/job
out=$(AWS_SECRET_ACCESS_KEY="x$AWS_SECRET_ACCESS_KEY" "$strata" backups ls s3://my-bucket/job 2>&1 || true)
case "$out" in
  *SignatureDoesNotMatch*) passed=$((passed + 1)) ;;
  *) failed=$((failed + 1)); echo "FAIL: a wrong secret did not say SignatureDoesNotMatch: $out" ;;
esac
check "a user without a policy" 1 env AWS_ACCESS_KEY_ID="$DENIED_KEY" \
  AWS_SECRET_ACCESS_KEY="$DENIED_SECRET" "$strata" backups ls s3://my-bucket/job
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
