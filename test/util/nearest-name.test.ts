import assert from 'node:assert/strict';
import { test } from 'node:test';
import { editDistance, nearestName } from '../../src/util/nearest-name.js';

test('edit distance counts insertions, deletions, substitutions and adjacent swaps', () => {
  assert.equal(editDistance('ttl', 'ttlMs'), 2);
  assert.equal(editDistance('cahce', 'cache'), 1);
  assert.equal(editDistance('kitten', 'sitting'), 3);
  assert.equal(editDistance('', 'abc'), 3);
  assert.equal(editDistance('same', 'same'), 0);
});

test('the nearest name: prefixes and few edits are suggested, far names are not', () => {
  const known = ['ttlMs', 'maxBytes', 'enabled', 'store'];
  assert.equal(nearestName('ttl', known), 'ttlMs');
  assert.equal(nearestName('maxbytes', known), 'maxBytes');
  assert.equal(nearestName('enabeld', known), 'enabled');
  assert.equal(nearestName('stroe', known), 'store');
  assert.equal(nearestName('colour', known), undefined);
  assert.equal(nearestName('x', known), undefined);
  // The closest of several close names.
  assert.equal(nearestName('intervalMs', ['intervalMsec', 'intervalsMs']), 'intervalsMs');
});
