// deploy/k8s validated offline against real schemas (SCALEOUT.md §8 item 10): `kubectl
// kustomize` renders it; every rendered object is checked by the npm models' JSON Schemas
// (kubernetes-models for Deployment/Service/ConfigMap, @kubernetes-models/gateway-api for
// Gateway/HTTPRoute, @kubernetes-models/keda for ScaledObject) or, for InferencePool and
// InferenceObjective (no npm package), by the checked-in schemas in deploy/k8s/schemas with ajv.
// A kind with no validator fails the test (nothing passes unchecked), and negative controls show
// each validator refuses a broken object. Skips without kubectl or without `npm ci` in
// tests/scaleout. Offline; no cluster.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const haveKubectl = spawnSync('kubectl', ['version', '--client'], { stdio: 'ignore' }).status === 0;
const haveModules = fs.existsSync(path.join(here, 'node_modules/kubernetes-models'));
const skip = (!haveKubectl && 'kubectl not installed') || (!haveModules && 'run `npm ci` in tests/scaleout');

async function validators() {
  const [{ Deployment }, { Service, ConfigMap }, gw, keda, { default: Ajv }] = await Promise.all([
    import('kubernetes-models/apps/v1'), import('kubernetes-models/v1'),
    import('@kubernetes-models/gateway-api/gateway.networking.k8s.io/v1'), import('@kubernetes-models/keda/keda.sh/v1alpha1'),
    import('ajv')]);
  const ajv = new Ajv({ allErrors: true, strict: false });
  const schema = (f) => {
    const v = ajv.compile(JSON.parse(fs.readFileSync(path.join(root, 'deploy/k8s/schemas', f), 'utf8')));
    return (doc) => { if (!v(doc)) throw new Error(ajv.errorsText(v.errors)); };
  };
  const model = (M) => (doc) => new M(doc).validate();
  return {
    'apps/v1/Deployment': model(Deployment),
    'v1/Service': model(Service),
    'v1/ConfigMap': model(ConfigMap),
    'gateway.networking.k8s.io/v1/Gateway': model(gw.Gateway),
    'gateway.networking.k8s.io/v1/HTTPRoute': model(gw.HTTPRoute),
    'keda.sh/v1alpha1/ScaledObject': model(keda.ScaledObject),
    'inference.networking.k8s.io/v1/InferencePool': schema('inferencepool-v1.schema.json'),
    'inference.networking.x-k8s.io/v1alpha2/InferenceObjective': schema('inferenceobjective-v1alpha2.schema.json'),
  };
}

function render() {
  const r = spawnSync('kubectl', ['kustomize', path.join(root, 'deploy/k8s')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  return r.stdout;
}

test('deploy/k8s: every rendered object validates against its schema', { skip, timeout: 30000 }, async () => {
  const { default: yaml } = await import('js-yaml');
  const v = await validators();
  const docs = yaml.loadAll(render()).filter(Boolean);
  const seen = new Set();
  for (const d of docs) {
    const k = `${d.apiVersion}/${d.kind}`;
    assert.ok(v[k], `no validator for ${k} (${d.metadata?.name}): add one, nothing passes unchecked`);
    assert.doesNotThrow(() => v[k](d), (e) => `${k} ${d.metadata?.name}: ${e}`);
    seen.add(d.kind);
  }
  for (const kind of ['Deployment', 'Service', 'HTTPRoute', 'ScaledObject', 'InferencePool', 'InferenceObjective'])
    assert.ok(seen.has(kind), `rendered output has no ${kind}`);
  // The HTTPRoute's backend is the InferencePool, as GIE wires it.
  const route = docs.find((d) => d.kind === 'HTTPRoute');
  const ref = route.spec.rules[0].backendRefs[0];
  assert.equal(ref.kind, 'InferencePool');
  assert.ok(docs.some((d) => d.kind === 'InferencePool' && d.metadata.name === ref.name));
});

test('deploy/k8s validators refuse broken objects (negative controls)', { skip, timeout: 30000 }, async () => {
  const { default: yaml } = await import('js-yaml');
  const v = await validators();
  const docs = yaml.loadAll(render()).filter(Boolean);
  const pick = (kind) => structuredClone(docs.find((d) => d.kind === kind));
  const broken = [
    ['keda.sh/v1alpha1/ScaledObject', (d) => { delete d.spec.scaleTargetRef; d.spec.minReplicaCount = 'one'; }, /scaleTargetRef|minReplicaCount/],
    ['apps/v1/Deployment', (d) => { d.spec.replicas = 'two'; }, /replicas/],
    ['gateway.networking.k8s.io/v1/HTTPRoute', (d) => { d.spec.rules[0].backendRefs[0].port = 'http'; }, /port/],
    ['inference.networking.k8s.io/v1/InferencePool', (d) => { d.spec.targetPorts = [{ number: 70000 }]; }, /maximum|<= 65535/],
    ['inference.networking.k8s.io/v1/InferencePool', (d) => { delete d.spec.endpointPickerRef; }, /endpointPickerRef/],
    ['inference.networking.k8s.io/v1/InferencePool', (d) => { d.spec.endpointPickerRef.failureMode = 'Maybe'; }, /allowed values|enum/],
    ['inference.networking.x-k8s.io/v1alpha2/InferenceObjective', (d) => { delete d.spec.poolRef; }, /poolRef/],
    ['inference.networking.x-k8s.io/v1alpha2/InferenceObjective', (d) => { d.spec.priority = 'high'; }, /integer/],
  ];
  for (const [k, breakIt, msg] of broken) {
    const d = pick(k.split('/').pop());
    breakIt(d);
    assert.throws(() => v[k](d), msg, k);
  }
});
