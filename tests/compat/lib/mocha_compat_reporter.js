'use strict'
// Mocha reporter for tests/compat/run.sh: prints mocha's usual "spec" output and writes one
// JSON record per test to the file named by $COMPAT_RESULTS_OUT (for lib/evaluate.py).
//
// id = "<file relative to cwd>::<suite > ... > test title>".
// A test that never reported (e.g. skipped because a before/beforeEach hook failed, or the run
// was cut short) is recorded as failed ("not run"), so nothing can silently drop out.
// A failing hook marks the test it ran for as failed; a hook failure outside any test gets its
// own record.
const fs = require('fs')
const path = require('path')

const Spec = require(require.resolve('mocha/lib/reporters/spec', {
  paths: [process.cwd()],
}))

const baseId = (runnable) => {
  const file = runnable.file ? path.relative(process.cwd(), runnable.file) : '<unknown>'
  return `${file}::${runnable.titlePath().join(' > ')}`
}
// Two tests of a file may share a full title (nsqjs's config_test.js has such pairs): the
// second gets " (2)" appended, the third " (3)", in declaration order.
const ids = new WeakMap()
const idOf = (runnable) => ids.get(runnable) || baseId(runnable)

const firstLine = (err) => {
  if (!err) return ''
  const s = String(err.message || err).split('\n').filter((l) => l.trim())
  return (err.name && err.name !== 'Error' ? err.name + ': ' : '') + (s[0] || '')
}

class CompatReporter extends Spec {
  constructor(runner, options) {
    super(runner, options)
    const results = new Map() // id -> record, in declaration order
    const set = (id, outcome, message) => {
      const prev = results.get(id)
      const rank = {'not run': -1, passed: 0, skipped: 1, failed: 2}
      if (!prev || rank[outcome] > rank[prev.outcome]) {
        results.set(id, {id, outcome, message: (message || '').slice(0, 500)})
      }
    }

    runner.once('start', () => {
      const seen = new Map()
      const walk = (suite) => {
        suite.tests.forEach((t) => {
          const base = baseId(t)
          const n = (seen.get(base) || 0) + 1
          seen.set(base, n)
          ids.set(t, n === 1 ? base : `${base} (${n})`)
          results.set(idOf(t), {id: idOf(t), outcome: 'not run', message: ''})
        })
        suite.suites.forEach(walk)
      }
      walk(runner.suite)
    })
    runner.on('pass', (test) => set(idOf(test), 'passed'))
    runner.on('pending', (test) => set(idOf(test), 'skipped'))
    runner.on('fail', (runnable, err) => {
      if (runnable.type === 'hook') {
        const cur = runnable.ctx && runnable.ctx.currentTest
        const msg = `${runnable.title}: ${firstLine(err)}`
        if (cur && cur.file) set(idOf(cur), 'failed', msg)
        else set(idOf(runnable), 'failed', msg)
      } else {
        set(idOf(runnable), 'failed', firstLine(err))
      }
    })
    runner.once('end', () => {
      const out = process.env.COMPAT_RESULTS_OUT
      if (!out) return
      const list = [...results.values()].map((r) =>
        r.outcome === 'not run'
          ? {id: r.id, outcome: 'failed', message: 'not run (an earlier hook failed or the run stopped)'}
          : r
      )
      fs.writeFileSync(out, JSON.stringify(list, null, 1))
    })
  }
}

module.exports = CompatReporter
