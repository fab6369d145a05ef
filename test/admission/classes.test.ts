import assert from 'node:assert/strict';
import { test } from 'node:test';
import { classOfDraw, classOfVllmPriority, lowerOnly, parsePriority, parsePriorityMix } from '../../src/admission/classes.js';

test('a request may lower its tenant’s class, never raise it', () => {
  assert.equal(lowerOnly('standard', 'sheddable'), 'sheddable');
  assert.equal(lowerOnly('standard', 'critical'), 'standard');
  assert.equal(lowerOnly('critical', null), 'critical');
  assert.equal(lowerOnly('sheddable', 'critical'), 'sheddable');
});

test('priorities parse from class names and vLLM integers through the mapping', () => {
  assert.equal(parsePriority(' Critical '), 'critical');
  assert.equal(parsePriority('2'), 'sheddable');
  assert.equal(parsePriority('-5'), 'critical');
  assert.equal(parsePriority('high'), null);
  assert.equal(parsePriority(1.5), null);
  const map = { critical: 10, standard: 20, sheddable: 30 };
  assert.equal(classOfVllmPriority(15, map), 'standard');
  assert.equal(classOfVllmPriority(21, map), 'sheddable');
  assert.equal(classOfVllmPriority(10, map), 'critical');
});

test('a priority mix is normalised and draws classes in proportion', () => {
  const mix = parsePriorityMix('critical=1,sheddable=4');
  assert.deepEqual(mix, { critical: 0.2, standard: 0, sheddable: 0.8 });
  assert.equal(classOfDraw(mix, 0.19), 'critical');
  assert.equal(classOfDraw(mix, 0.2), 'sheddable');
  assert.equal(classOfDraw(mix, 0.9999999999), 'sheddable');
  assert.throws(() => parsePriorityMix('urgent=1'), /unknown priority class/);
  assert.throws(() => parsePriorityMix('critical=0'), /positive weight/);
  assert.throws(() => parsePriorityMix('critical'), /class=weight/);
});
