#!/usr/bin/env bash
# kubectl against a real berth: get/create/apply/patch/label/delete, get -w, wait, an
# invalid object showing the server's message, the controllers at work (an RC's pods,
# service accounts, cascading and namespace deletion) and a pod running on this machine
# (logs, exec, exec -it and attach -it through a terminal), and the generators that send
# protobuf bodies (create configmap|secret|namespace|serviceaccount|pdb|job|cronjob,
# debug, drain), Jobs and CronJobs, DaemonSets and a drain through the eviction API that
# a disruption budget stops, a Service's Endpoints and EndpointSlices, StatefulSets by ordinal with a partitioned update and undo,
# and a HorizontalPodAutoscaler's conditions.
# Usage: smoke.sh BERTH_BINARY KUBECTL_BINARY
set -uo pipefail
berth=${1:?usage: smoke.sh BERTH_BINARY KUBECTL_BINARY}
kubectl_bin=${2:?usage: smoke.sh BERTH_BINARY KUBECTL_BINARY}
work=$(mktemp -d)
mkdir -p "$work/manifests"
BERTH_NO_POD_NETWORK=true "$berth" serve --data-dir "$work/data" --listen 127.0.0.1:0 --node-name n1 \
  --default-runtime process --pod-manifest-path "$work/manifests" >"$work/berth.log" 2>&1 &
server=$!
cleanup() {
  kill "$server" 2>/dev/null
  wait "$server" 2>/dev/null
  # The pods berth ran end with it: nothing of the test stays on the machine.
  "$berth" node reset --data-dir "$work/data" >/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
for _ in $(seq 100); do
  grep -q " ready" "$work/berth.log" && break
  sleep 0.1
done
export KUBECONFIG="$work/data/kubeconfig"
k() { "$kubectl_bin" --cache-dir "$work/cache" "$@"; }

passed=0
failed=0
rc() { # prints the exit code of a command instead of its output
  "$@" >/dev/null 2>&1
  echo "rc=$?"
}
check() { # check NAME EXPECTED-REGEX COMMAND...
  local name=$1 want=$2
  shift 2
  local out
  out=$("$@" 2>&1)
  if grep -Eq -- "$want" <<<"$out"; then
    passed=$((passed + 1))
    echo "ok   $name"
  else
    failed=$((failed + 1))
    echo "FAIL $name: wanted /$want/, got:"
    sed 's/^/     /' <<<"$out"
  fi
}

cat >"$work/pod.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: web-1
  labels:
    app: web
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: registry.example/app:1
    command: [sleep, "3600"]
YAML
cat >"$work/bad.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: bad
  bogusField: 1
spec:
  containers: []
YAML
cat >"$work/cm.yaml" <<'YAML'
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
data:
  mode: fast
YAML

check "get namespaces" "kube-system +Active" k get ns
check "apply creates" "pod/web-1 created" k apply -f "$work/pod.yaml"
check "apply again is unchanged" "pod/web-1 unchanged" k apply -f "$work/pod.yaml"
sed -i 's/app:1/app:2/' "$work/pod.yaml"
check "apply a change" "pod/web-1 configured" k apply -f "$work/pod.yaml"
check "the change is stored" "registry.example/app:2" k get pod web-1 -o jsonpath='{.spec.containers[0].image}'
check "the pod runs on this machine" "condition met" k wait --for=condition=Ready pod/web-1 --timeout=30s
check "the changed container is restarted" "condition met" k wait --for=jsonpath='{.status.containerStatuses[0].restartCount}'=1 pod/web-1 --timeout=30s
check "get pods prints a table" "web-1 +1/1 +Running +1" k get pods
check "get -o wide adds columns" "NOMINATED NODE" k get pods -o wide
check "create -f" "configmap/settings created" k create -f "$work/cm.yaml"
check "create of an existing name" 'AlreadyExists.*configmaps "settings" already exists' k create -f "$work/cm.yaml"
check "edit" "configmap/settings edited" env KUBE_EDITOR="sed -i s/fast/edited/" "$kubectl_bin" --cache-dir "$work/cache" edit cm settings
check "the edit is stored" "edited" k get cm settings -o jsonpath='{.data.mode}'
check "label" "pod/web-1 labeled" k label pod web-1 tier=fe
check "label selector" "web-1" k get pods -l tier=fe -o name
check "annotate" "pod/web-1 annotated" k annotate pod web-1 note=hello
check "strategic patch" "pod/web-1 patched" k patch pod web-1 -p '{"metadata":{"labels":{"x":"y"}}}'
check "a patch that changes nothing" "patched \(no change\)" k patch pod web-1 -p '{"metadata":{"labels":{"x":"y"}}}'
check "merge patch" "configmap/settings patched" k patch cm settings --type=merge -p '{"data":{"mode":"slow"}}'
check "json patch" "configmap/settings patched" k patch cm settings --type=json -p '[{"op":"remove","path":"/data/mode"}]'
check "unknown field refused (Strict)" 'strict decoding error: unknown field "metadata.bogusField"' k create -f "$work/bad.yaml"
check "invalid object shows the server's message" 'The Pod "bad" is invalid: spec.containers: Required value' k create -f "$work/bad.yaml" --validate=false
check "explain reads the OpenAPI schema" "FIELD: restartPolicy <string>" k explain pods.spec.restartPolicy
check "cluster-info" "Kubernetes control plane is running at https://" k cluster-info
check "auth whoami" "Username +admin" k auth whoami
check "auth can-i" "^yes" k auth can-i create pods
check "auth can-i --list" "^\*\.\* +\[\] +\[\] +\[\*\]" k auth can-i --list
check "create service (sent in protobuf)" "service/web created" k create service nodeport web --tcp=80:8080
check "the kubernetes Service leads to the API" "kubernetes +ClusterIP +10\.96\.0\.1 +<none> +443/TCP" k get svc kubernetes
check "discovery with a trailing slash" '"kind":"APIVersions"' k get --raw /api/
check "get svc prints kubectl's columns" "web +NodePort +10\.96\.[0-9.]+ +<none> +80:3[0-9]{4}/TCP" k get svc web
check "the kubernetes Endpoints lead to the API" "kubernetes +127\.0\.0\.1:[0-9]+" k get ep kubernetes
check "get endpointslices prints kubectl's columns" "NAME +ADDRESSTYPE +PORTS +ENDPOINTS +AGE" k get endpointslices

cat >"$work/rc.yaml" <<'YAML'
apiVersion: v1
kind: ReplicationController
metadata:
  name: frontend
spec:
  replicas: 2
  template:
    metadata:
      labels:
        app: frontend
    spec:
      containers:
      - name: main
        image: registry.example/fe:1
YAML
printf 'apiVersion: v1\nkind: ReplicationController\nmetadata:\n  name: frontend\nspec:\n  replicas: 5\n' >"$work/rc5.yaml"
check "server-side apply creates" "replicationcontroller/frontend serverside-applied" k apply --server-side -f "$work/rc.yaml"
check "another manager conflicts" "conflict with \"kubectl\" using v1: .spec.replicas" k apply --server-side --field-manager=other -f "$work/rc5.yaml"
check "forcing takes the field" "serverside-applied" k apply --server-side --force-conflicts --field-manager=other -f "$work/rc5.yaml"
check "scale" "replicationcontroller/frontend scaled" k scale rc frontend --replicas=3
check "the replication manager makes the pods" "condition met" k wait --for=jsonpath='{.status.replicas}'=3 rc/frontend --timeout=20s
check "rc table" "frontend +3 +3 +0" k get rc frontend
check "the pods belong to the rc" "frontend-" k get pods -l app=frontend -o name
check "a pod without a command says why" "CreateContainerConfigError" k get pods -l app=frontend
check "every namespace has a default service account" "default +0" k get serviceaccounts

# A DeploymentConfig (apps.openshift.io/v1): served like a built-in kind.
cat >"$work/dc.yaml" <<'YAML'
apiVersion: apps.openshift.io/v1
kind: DeploymentConfig
metadata:
  name: hello-dc
spec:
  replicas: 2
  template:
    metadata:
      labels:
        app: hello-dc
    spec:
      containers:
      - name: main
        image: registry.example/hello:1
        command: [sleep, "3600"]
YAML
check "apply a deployment config" "deploymentconfig.apps.openshift.io/hello-dc created" k apply -f "$work/dc.yaml"
# kubectl has no Go type for DCs: it applies them with a JSON merge patch, which replaces
# the (server-defaulted) container list, so a second apply reports "configured".
check "apply it again" "deploymentconfig.apps.openshift.io/hello-dc (configured|unchanged)" k apply -f "$work/dc.yaml"
check "patch dc (strategic merge by default)" "deploymentconfig.apps.openshift.io/hello-dc patched" k patch dc hello-dc -p '{"spec":{"template":{"spec":{"containers":[{"name":"main","image":"registry.example/hello:2"}]}}}}'
check "the patch merged the container by name" "^registry.example/hello:2 sleep$" k get dc hello-dc -o jsonpath='{.spec.template.spec.containers[0].image} {.spec.template.spec.containers[0].command[0]}'
check "label dc" "deploymentconfig.apps.openshift.io/hello-dc labeled" k label dc hello-dc tier=fe
check "get dc shows the table" "^NAME +REVISION +DESIRED +CURRENT +TRIGGERED BY" k get dc
check "the DC controller rolls the changes out" "condition met" k wait --for=jsonpath='{.status.conditions[?(@.type=="Progressing")].reason}'=NewReplicationControllerAvailable dc/hello-dc --timeout=60s
check "all of its replicas are available" "condition met" k wait --for=jsonpath='{.status.availableReplicas}'=2 dc/hello-dc --timeout=60s
check "get dc shows the row" "^hello-dc +[2-9] +2 +2 +config$" k get dc
# Earlier versions may have been superseded (and their deployers deleted) by the quick
# changes above; the latest deployment ran to its end.
latest=$(k get dc hello-dc -o jsonpath='{.status.latestVersion}')
check "the latest deployer pod's log" "^--> Success$" k logs "pod/hello-dc-$latest-deploy"
check "the deployments are RCs of the DC" "^hello-dc-1 +0 +0 +0" k get rc -l openshift.io/deployment-config.name=hello-dc
check "get all includes deployment configs" "deploymentconfig.apps.openshift.io/hello-dc" k get all
check "scale dc" "deploymentconfig.apps.openshift.io/hello-dc scaled" k scale dc/hello-dc --replicas=3
check "the scale is stored" "^3$" k get dc hello-dc -o jsonpath='{.spec.replicas}'
check "explain dc" "KIND: +DeploymentConfig" k explain dc
check "explain dc fields" "FIELD: triggers <\[\]DeploymentTriggerPolicy>" k explain dc.spec.triggers
check "an invalid dc shows the spec's message" 'replicas cannot be negative' k patch dc hello-dc --type=merge -p '{"spec":{"replicas":-1}}'
check "describe dc" "Name: +hello-dc" k describe dc hello-dc
check "server-side apply of a dc" "deploymentconfig.apps.openshift.io/hello-dc serverside-applied" k apply --server-side --force-conflicts -f "$work/dc.yaml"
check "delete dc" 'deploymentconfig.apps.openshift.io "hello-dc" deleted' k delete dc hello-dc

# get -w --watch-only prints only the changes made while it watches.
(k get pods -w --watch-only --request-timeout=4s >"$work/watch.out" 2>&1 &)
sleep 1.5
k label pod web-1 watched=yes >/dev/null
sleep 3
check "get -w sees changes" "web-1 +1/1 +Running" cat "$work/watch.out"

check "wait for a condition" "pod/web-1 condition met" k wait --for=condition=Ready pod/web-1 --timeout=20s
check "exec" "^hi$" k exec web-1 -- echo hi
check "exec passes the exit code" "^rc=3$" rc k exec web-1 -- sh -c 'exit 3'
check "exec -i passes stdin" "^hello-stdin$" sh -c "echo hello-stdin | $kubectl_bin --cache-dir $work/cache exec -i web-1 -- cat"
# -t needs a terminal on kubectl's stdin: script(1) from util-linux gives it one, of a
# known size; what is piped into script is typed into that terminal.
if command -v script >/dev/null; then
  exec_tty() {
    (printf 'echo in-$((6 * 7)); tty; stty size; exit 5\n'; sleep 5) |
      script -qec "stty cols 101 rows 33; $kubectl_bin --cache-dir $work/cache exec -it web-1 -- sh" /dev/null
    echo "rc=$?"
  }
  exec_tty >"$work/tty.out" 2>&1
  # What is typed may reach the terminal before the shell runs: the terminal echoes it and
  # the output follows the shell's prompt, so the lines are matched after any prompt.
  check "exec -it runs on a terminal" "^([#$] )?in-42$" tr -d '\r' <"$work/tty.out"
  check "exec -it: the command sees a terminal" "^([#$] )?/dev/pts/[0-9]+" tr -d '\r' <"$work/tty.out"
  check "exec -it: of kubectl's size" "^([#$] )?33 101$" tr -d '\r' <"$work/tty.out"
  check "exec -it passes the exit code" "^rc=5$" tr -d '\r' <"$work/tty.out"
  printf 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: shell\nspec:\n  restartPolicy: Never\n  terminationGracePeriodSeconds: 1\n  containers:\n  - {name: main, image: registry.example/sh:1, command: [sh], stdin: true, tty: true}\n' >"$work/shell.yaml"
  k apply -f "$work/shell.yaml" >/dev/null
  k wait --for=condition=Ready pod/shell --timeout=30s >/dev/null
  (printf 'echo main-$((6 * 7)); tty; exit 6\n'; sleep 5) |
    script -qec "$kubectl_bin --cache-dir $work/cache attach -it shell" /dev/null >"$work/attach.out" 2>&1
  check "attach -it types into the main process's terminal" "^main-42" tr -d '\r' <"$work/attach.out"
  check "attach -it: the main process runs on a terminal" "^([#$] )?/dev/pts/[0-9]+" tr -d '\r' <"$work/attach.out"
  check "the attached container ended with its code" "condition met" k wait --for=jsonpath='{.status.containerStatuses[0].state.terminated.exitCode}'=6 pod/shell --timeout=20s
  k delete pod shell --timeout=20s >/dev/null
else
  echo "skip exec -it and attach -it: script(1) from util-linux is not installed"
fi
check "delete" 'pod "web-1" deleted' k delete pod web-1 --timeout=20s
check "gone" "NotFound" k get pod web-1
check "wait for deletion of a missing object" "^rc=0$" rc k wait --for=delete pod/web-1 --timeout=5s

cat >"$work/hello.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: hello
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: registry.example/hello:1
    command: [sh, -c, "echo hello from berth; sleep 1; echo goodbye"]
YAML
k apply -f "$work/hello.yaml" >/dev/null
check "logs -f streams until the container ends" "^goodbye$" k logs -f hello --pod-running-timeout=30s
check "the pod succeeded" "condition met" k wait --for=jsonpath='{.status.phase}'=Succeeded pod/hello --timeout=20s
check "logs" "^hello from berth" k logs hello
check "logs --tail" "^goodbye$" k logs hello --tail=1
cat >"$work/hog.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: hog
spec:
  restartPolicy: Never
  containers:
  - name: main
    image: registry.example/hog:1
    command: [sh, -c, "head -c 200m /dev/zero | tail"]
    resources:
      limits:
        memory: 32Mi
YAML
k apply -f "$work/hog.yaml" >/dev/null
check "a container past its memory limit is OOM killed" "condition met" k wait --for=jsonpath='{.status.containerStatuses[0].state.terminated.reason}'=OOMKilled pod/hog --timeout=30s
check "get pods shows OOMKilled" "hog +0/1 +OOMKilled" k get pod hog
k delete pod hog --timeout=20s >/dev/null
check "deleting an rc deletes its pods" "rc=0" rc k delete rc frontend --wait=true --timeout=20s
check "the pods go too" "^rc=0$" rc k wait --for=delete pod -l app=frontend --timeout=20s
printf 'apiVersion: v1\nkind: Namespace\nmetadata:\n  name: team\n' >"$work/ns.yaml"
printf 'apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  namespace: team\n' >"$work/cm-team.yaml"
k apply -f "$work/ns.yaml" >/dev/null
k apply -f "$work/cm-team.yaml" >/dev/null
check "deleting a namespace waits until it is emptied and gone" 'namespace "team" deleted' k delete ns team --timeout=30s
check "the namespace is gone" "NotFound" k get ns team

# kubectl's generators and typed clients send their bodies in protobuf.
check "create configmap (a protobuf body)" "configmap/x created" k create configmap x --from-literal=a=b
check "its data is stored" "^b$" k get cm x -o jsonpath='{.data.a}'
check "create secret generic (protobuf)" "secret/s created" k create secret generic s --from-literal=k=v
check "the secret's value reads back" "^v$" sh -c "$kubectl_bin --cache-dir $work/cache get secret s -o jsonpath='{.data.k}' | base64 -d"
check "create namespace (protobuf)" "namespace/n created" k create namespace n
check "the namespace is active" "^Active$" k get ns n -o jsonpath='{.status.phase}'
check "create serviceaccount (protobuf)" "serviceaccount/sa created" k create serviceaccount sa
check "run" "pod/p created" k run p --image=busybox --restart=Never --command -- sh -c 'echo hi'
check "the node agent runs it" "condition met" k wait --for=jsonpath='{.status.phase}'=Succeeded pod/p --timeout=30s
check "its log says hi" "^hi$" k logs p
# A node's debugging pod shares the host's namespaces and root: Pod Security's baseline
# refuses it until the namespace is labelled privileged.
check "debug node is refused by pod security" 'violates PodSecurity "baseline:latest"' k debug node/n1 --image=busybox -- true
check "label the namespace privileged (protobuf)" "namespace/default labeled" k label namespace default pod-security.kubernetes.io/enforce=privileged
debug_out=$(k debug node/n1 --image=busybox -- sh -c 'echo node-debug' 2>&1)
debug_pod=$(grep -o 'node-debugger-n1-[a-z0-9]*' <<<"$debug_out" | head -1)
check "debug node creates its pod (protobuf)" "Creating debugging pod node-debugger-n1-" echo "$debug_out"
check "the debugging pod runs on the node" "condition met" k wait --for=jsonpath='{.status.phase}'=Succeeded "pod/${debug_pod:-none}" --timeout=30s
check "its log" "^node-debug$" k logs "${debug_pod:-none}"
check "drain deletes the pods, with DeleteOptions in protobuf" "node/n1 drained" k drain n1 --disable-eviction --force --grace-period=1 --timeout=30s
check "the drained pods are gone" "^rc=0$" rc k wait --for=delete pod/p --timeout=20s
check "uncordon" "node/n1 uncordoned" k uncordon n1
check "a node that is not cordoned selects as schedulable" "^n1 +Ready" k get nodes --no-headers --field-selector spec.unschedulable=false
k delete ns n --timeout=30s >/dev/null 2>&1

# berth's own client prints what kubectl prints, byte for byte. Ages are computed when
# each answers, so a pair that straddles a second is asked again.
same() { # same NAME ARGS...
  local name=$1
  shift
  local a b
  for _ in 1 2 3; do
    a=$(k "$@" 2>&1)
    b=$("$berth" "$@" 2>&1)
    [ "$a" = "$b" ] && break
    sleep 1
  done
  if [ "$a" = "$b" ]; then
    passed=$((passed + 1))
    echo "ok   berth $name"
  else
    failed=$((failed + 1))
    echo "FAIL berth $name differs from kubectl (- kubectl, + berth):"
    diff <(echo "$a") <(echo "$b") | sed 's/^/     /'
  fi
}
cat >"$work/cmp.yaml" <<'YAML'
apiVersion: v1
kind: ReplicationController
metadata:
  name: cmp
spec:
  replicas: 2
  selector: {app: cmp}
  template:
    metadata:
      labels: {app: cmp}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: main
        image: registry.example/cmp:1
        command: [sh, -c, "exec sleep 3601"]
        ports: [{containerPort: 8080}]
        readinessProbe: {exec: {command: ["true"]}, periodSeconds: 1}
---
apiVersion: apps.openshift.io/v1
kind: DeploymentConfig
metadata:
  name: cmpdc
spec:
  replicas: 1
  selector: {app: cmpdc}
  template:
    metadata:
      labels: {app: cmpdc}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: main
        image: registry.example/cmp:1
        command: [sh, -c, "exec sleep 3602"]
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: cmprs
spec:
  replicas: 1
  selector:
    matchLabels: {app: cmprs}
    matchExpressions: [{key: tier, operator: In, values: [b, a]}]
  template:
    metadata:
      labels: {app: cmprs, tier: a}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
      - name: main
        image: registry.example/cmp:1
        command: [sh, -c, "exec sleep 3603"]
YAML
check "berth create -f" "replicationcontroller/cmp created" "$berth" create -f "$work/cmp.yaml"
check "berth waits for the RC's pods" "condition met" "$berth" wait --for=condition=Ready pod -l app=cmp --timeout=60s
check "berth rollout status" 'replication controller "cmpdc-1" successfully rolled out' "$berth" rollout status dc/cmpdc --timeout=60s
pod=$(k get pods -l app=cmp -o jsonpath='{.items[0].metadata.name}')
same "get pods" get pods -l app=cmp
same "get pods -o wide" get pods -o wide -l app=cmp
same "get pods --show-labels" get pods --show-labels -l app=cmp
same "get rc" get rc cmp
same "get dc" get dc cmpdc
same "get rc,dc" get rc/cmp dc/cmpdc
same "get -o name" get pods -l app=cmp -o name
same "get -o json" get pod "$pod" -o json
same "get -o yaml" get rc cmp -o yaml
same "get -o jsonpath" get pods -l app=cmp -o jsonpath='{range .items[*]}{.metadata.name}{"\t"}{.status.phase}{"\n"}{end}'
same "get -o custom-columns" get pods -l app=cmp -o custom-columns=NAME:.metadata.name,IMAGE:.spec.containers[0].image
same "get nodes" get nodes
same "get a missing pod" get pod nope
same "describe rc" describe rc cmp
check "the ReplicaSet controller makes its pod" "condition met" k wait --for=jsonpath='{.status.readyReplicas}'=1 rs/cmprs --timeout=60s
same "get rs -o wide" get rs cmprs -o wide
same "describe rs" describe rs cmprs
# Deployments: kubectl's generator, rollouts, history, rollback, restart, pause and scale.
check "create deployment (sent in protobuf)" "deployment.apps/webd created" k create deployment webd --image=registry.example/web:1 --replicas=2 -- sleep 3600
check "rollout status" 'deployment "webd" successfully rolled out' k rollout status deploy/webd --timeout=60s
check "set image" "deployment.apps/webd image updated" k set image deploy/webd web=registry.example/web:2
check "the new image rolls out" "successfully rolled out" k rollout status deploy/webd --timeout=60s
check "rollout history" "^2 +<none>" k rollout history deploy/webd
check "rollout undo" "deployment.apps/webd rolled back" k rollout undo deploy/webd
check "the undo rolls out" "successfully rolled out" k rollout status deploy/webd --timeout=60s
check "the first image is back" "^registry.example/web:1$" k get deploy webd -o jsonpath='{.spec.template.spec.containers[0].image}'
check "rollout restart" "deployment.apps/webd restarted" k rollout restart deploy/webd
check "rollout pause" "deployment.apps/webd paused" k rollout pause deploy/webd
check "rollout resume" "deployment.apps/webd resumed" k rollout resume deploy/webd
check "scale deployment" "deployment.apps/webd scaled" k scale deploy/webd --replicas=3
check "the scaled deployment settles" "successfully rolled out" k rollout status deploy/webd --timeout=60s
same "get deploy -o wide" get deploy webd -o wide
same "describe deploy" describe deploy webd --show-events=false
same "rollout history deploy" rollout history deploy/webd
check "berth rollout status deploy" 'deployment "webd" successfully rolled out' "$berth" rollout status deploy/webd
# A HorizontalPodAutoscaler (autoscaling/v2 from a current kubectl, v1 from older ones):
# the pods ask for no CPU, so the conditions say it cannot be measured in percent.
check "autoscale" "horizontalpodautoscaler.autoscaling/webd autoscaled" k autoscale deploy/webd --min=2 --max=5 --cpu-percent=50
check "get hpa" "^webd +Deployment/webd +cpu: <unknown>/50% +2 +5 +[0-9]+ " k get hpa webd
check "the autoscaler reads the target's scale" "condition met" k wait --for=condition=AbleToScale hpa/webd --timeout=30s
check "why it cannot scale is a condition" "ScalingActive +False +FailedGetResourceMetric" k describe hpa webd
same "get hpa -o wide" get hpa webd -o wide
same "describe hpa" describe hpa webd --show-events=false
check "delete hpa" 'horizontalpodautoscaler.autoscaling "webd" deleted' k delete hpa webd
# Jobs and CronJobs: a Job run to completion, a CronJob's table, a manual run of it.
check "create job (sent in protobuf)" "job.batch/pi created" k create job pi --image=registry.example/busybox -- sh -c 'echo done'
check "the job completes" "condition met" k wait --for=condition=complete job/pi --timeout=60s
check "the job's log" "^done$" k logs job/pi
check "get jobs" "^pi +Complete +1/1 " k get jobs
check "create cronjob" "cronjob.batch/tick created" k create cronjob tick --image=registry.example/busybox --schedule='*/5 * * * *' -- true
check "get cronjobs" '^tick +\*/5 \* \* \* \* +<none> +False +0 +<none> ' k get cronjobs
check "create job --from=cronjob" "job.batch/tick-now created" k create job tick-now --from=cronjob/tick
check "the manual run completes" "condition met" k wait --for=condition=complete job/tick-now --timeout=60s
check "a schedule that does not parse" 'spec.schedule: Invalid value: "every day"' k create cronjob bad --image=registry.example/busybox --schedule='every day' -- true
same "get jobs -o wide" get job pi -o wide
same "describe job" describe job pi --show-events=false
same "describe cronjob" describe cronjob tick --show-events=false
check "delete cronjob" 'cronjob.batch "tick" deleted' k delete cronjob tick
check "delete job" 'job.batch "pi" deleted' k delete job pi
# DaemonSets and disruption budgets: a daemon pod on the node and its rollout; a drain
# through the eviction API that the budget stops short.
cat >"$work/ds.yaml" <<'YAML'
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels: {app: agent}
  template:
    metadata:
      labels: {app: agent}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: registry.example/agent:1
        command: [sleep, "3600"]
YAML
check "create a daemon set" "daemonset.apps/agent created" k apply -f "$work/ds.yaml"
check "its rollout" 'daemon set "agent" successfully rolled out' k rollout status ds/agent --timeout=60s
check "get ds" "^agent +1 +1 +1 +1 +1 +<none> " k get ds agent --no-headers
check "set image on a daemon set" "daemonset.apps/agent image updated" k set image ds/agent main=registry.example/agent:2
check "the daemon set rolls out again" 'daemon set "agent" successfully rolled out' k rollout status ds/agent --timeout=60s
check "rollout history ds" "^2 +<none>" k rollout history ds/agent
same "describe ds" describe ds agent --show-events=false
check "berth rollout status ds" 'daemon set "agent" successfully rolled out' "$berth" rollout status ds/agent
check "create pdb (protobuf)" "poddisruptionbudget.policy/webd created" k create pdb webd --selector=app=webd --min-available=2
check "the budget's figures" "^webd +2 +N/A +1 " k get pdb webd --no-headers
same "describe pdb" describe pdb webd --show-events=false
check "cordon" "node/n1 cordoned" k cordon n1
check "drain evicts until the budget stops it" "Cannot evict pod as it would violate the pod's disruption budget" k drain n1 --pod-selector=app=webd --delete-emptydir-data --timeout=8s
check "uncordon after the drain" "node/n1 uncordoned" k uncordon n1
check "the deployment recovers" "successfully rolled out" k rollout status deploy/webd --timeout=60s
check "delete pdb" 'poddisruptionbudget.policy "webd" deleted' k delete pdb webd
check "delete ds" 'daemonset.apps "agent" deleted' k delete ds agent
# StatefulSets: pods by ordinal, their claims, a partitioned update, history and undo.
cat >"$work/sts.yaml" <<'YAML'
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  replicas: 2
  serviceName: db
  selector:
    matchLabels: {app: db}
  template:
    metadata:
      labels: {app: db}
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: main
        image: registry.example/db:1
        command: [sleep, "3600"]
YAML
check "create a stateful set" "statefulset.apps/db created" k apply -f "$work/sts.yaml"
check "its rollout" "partitioned roll out complete: 2 new pods have been updated" k rollout status sts/db --timeout=60s
check "get sts" "^db +2/2 " k get sts db --no-headers
check "its pods by ordinal" "^db-1 +1/1 +Running" k get pods -l app=db --no-headers
check "set image on a stateful set" "statefulset.apps/db image updated" k set image sts/db main=registry.example/db:2
check "the stateful set rolls out again" "partitioned roll out complete: 2 new pods have been updated" k rollout status sts/db --timeout=60s
check "rollout history sts" "^2 +<none>" k rollout history sts/db
same "describe sts" describe sts db --show-events=false
check "berth rollout undo sts" "statefulset.apps/db rolled back" "$berth" rollout undo sts/db
check "berth rollout status sts" "partitioned roll out complete: 2 new pods have been updated" "$berth" rollout status sts/db
check "scale sts" "statefulset.apps/db scaled" k scale sts db --replicas=1
check "claims are served" "No resources found in default namespace" k get pvc
check "delete sts" 'statefulset.apps "db" deleted' k delete sts db
check "delete deployment" 'deployment.apps "webd" deleted' k delete deploy webd
same "describe node" describe node n1
same "describe namespace" describe namespace default
check "berth rollout history" "1[[:space:]]+Complete[[:space:]]+config change" "$berth" rollout history dc/cmpdc
check "berth delete" 'replicationcontroller "cmp" deleted' "$berth" delete -f "$work/cmp.yaml"
check "berth get after delete" "No resources found" "$berth" get rc,dc

# A static pod: run from a manifest file, mirrored into the API.
cat >"$work/manifests/static.yaml" <<'YAML'
apiVersion: v1
kind: Pod
metadata:
  name: static
spec:
  terminationGracePeriodSeconds: 2
  containers:
  - name: main
    image: registry.example/static:1
    command: [sh, -c, "echo static says hi; exec sleep 3600"]
YAML
for _ in $(seq 100); do
  k get pod static-n1 >/dev/null 2>&1 && break
  sleep 0.1
done
check "a static pod is mirrored and runs" "condition met" k wait --for=condition=Ready pod/static-n1 --timeout=30s
check "its mirror pod says where it comes from" "^file$" k get pod static-n1 -o jsonpath='{.metadata.annotations.kubernetes\.io/config\.source}'
check "logs of a static pod" "^static says hi$" k logs static-n1
check "exec in a static pod" "^hi$" k exec static-n1 -- echo hi
check "the agent's pods through the node proxy" '"name":"static-n1"' k get --raw /api/v1/nodes/n1/proxy/pods
check "the agent's health through the node proxy" "^ok$" k get --raw /api/v1/nodes/n1/proxy/healthz
rm "$work/manifests/static.yaml"
check "removing the manifest deletes the mirror pod" "^rc=0$" rc k wait --for=delete pod/static-n1 --timeout=30s

# A CustomResourceDefinition: served at once, its objects checked by its schema.
cat >"$work/crd.yaml" <<'YAML'
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas}
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              cronSpec: {type: string, description: "When to run."}
              replicas: {type: integer, minimum: 1, default: 1}
              maxReplicas: {type: integer}
            x-kubernetes-validations:
            - rule: "!has(self.maxReplicas) || self.replicas <= self.maxReplicas"
              messageExpression: "'replicas may be at most ' + string(self.maxReplicas)"
            - {rule: "self.cronSpec == oldSelf.cronSpec", message: cronSpec is immutable}
          status:
            type: object
            properties:
              replicas: {type: integer}
YAML
cat >"$work/ct.yaml" <<'YAML'
apiVersion: stable.example.com/v1
kind: CronTab
metadata: {name: nightly}
spec: {cronSpec: "0 3 * * *"}
YAML
check "a kind nothing serves is reported as such" 'no matches for kind "CronTab" in version "stable.example.com/v1"' k apply -f "$work/ct.yaml"
check "apply a CustomResourceDefinition" "customresourcedefinition.apiextensions.k8s.io/crontabs.stable.example.com created" k apply -f "$work/crd.yaml"
check "it is established" "condition met" k wait --for=condition=Established crd/crontabs.stable.example.com --timeout=10s
check "apply a custom object" "crontab.stable.example.com/nightly created" k apply -f "$work/ct.yaml"
check "get by short name, with the printer columns and a default" "^nightly +0 3 \* \* \* +1 *$" k get ct --no-headers
check "explain reads the definition's schema" "When to run" k explain crontab.spec.cronSpec
check "the schema refuses a bad value" "spec.replicas: Invalid value: 0: spec.replicas in body should be greater than or equal to 1" k patch ct nightly --type=merge -p '{"spec":{"replicas":0}}'
check "a CEL rule refuses with its message" "spec: Invalid value: replicas may be at most 2" k patch ct nightly --type=merge -p '{"spec":{"replicas":3,"maxReplicas":2}}'
check "a CEL transition rule keeps a field as it was" "cronSpec is immutable" k patch ct nightly --type=merge -p '{"spec":{"cronSpec":"0 4 * * *"}}'
check "a strategic merge patch is refused as upstream" "not supported by stable.example.com/v1, Kind=CronTab" k patch ct nightly -p '{"spec":{"replicas":2}}'
check "scale a custom object" "crontab.stable.example.com/nightly scaled" k scale ct nightly --replicas=3
check "get all includes nothing it should not" "service/kubernetes" k get all
check "delete the definition: its objects go first" "deleted" k delete crd crontabs.stable.example.com --timeout=30s
check "no custom objects are left" "the server doesn't have a resource type|No resources found|could not find the requested resource" k get ct

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
