'use strict';
// A module-resolution cache for the n8n processes of one toolchain (loaded with `node --require`).
//
// n8n's start resolves ~15,000 `require()` specifiers; Node answers each by walking node_modules
// folders, reading package.json "exports" and stat-ing candidate files, about a quarter of a lane's
// start-up CPU on this machine. The answers only depend on the requiring file's folder, the
// specifier and the installed files, so they are recorded once per install and read by every later
// process: a hit skips the walk, a miss asks Node as before (and is recorded). Only resolutions
// from and to files under N8N_EVAL_RESOLVE_ROOT (the toolchain cache) are kept, so nothing of a
// lane's own folder is shared. The file carries a stamp (Node version + the install's stamp from
// N8N_EVAL_RESOLVE_STAMP): a file from another install is ignored and rewritten.
//
// Without N8N_EVAL_RESOLVE_CACHE in the environment (e.g. the task runner n8n spawns with its own
// environment) this does nothing.

const file = process.env.N8N_EVAL_RESOLVE_CACHE;
const root = process.env.N8N_EVAL_RESOLVE_ROOT;

if (file && root) {
  const Module = require('node:module');
  const fs = require('node:fs');
  const path = require('node:path');

  const prefix = root.endsWith(path.sep) ? root : root + path.sep;
  const stamp = `${process.version} ${process.env.N8N_EVAL_RESOLVE_STAMP || ''}`;

  const read = () => {
    try {
      const data = JSON.parse(fs.readFileSync(file, 'utf8'));
      if (data && data.stamp === stamp && data.entries && typeof data.entries === 'object') return data.entries;
    } catch {
      // no cache yet, or an unreadable one: start empty
    }
    return {};
  };

  const cache = Object.assign(Object.create(null), read());
  let recorded = 0;

  const resolve = Module._resolveFilename;
  Module._resolveFilename = function resolveFilename(request, parent, isMain, options) {
    if (options !== undefined || !parent || typeof parent.filename !== 'string' || Module.isBuiltin(request)) {
      return resolve.call(this, request, parent, isMain, options);
    }
    const from = path.dirname(parent.filename);
    const key = `${from}\0${request}`;
    const hit = cache[key];
    if (hit !== undefined) return hit;
    const found = resolve.call(this, request, parent, isMain, options);
    if (from.startsWith(prefix) && typeof found === 'string' && found.startsWith(prefix)) {
      cache[key] = found;
      recorded += 1;
    }
    return found;
  };

  // Merge what this process learned into the file (others may have written meanwhile); atomic.
  const save = () => {
    if (recorded === 0) return;
    recorded = 0;
    const tmp = `${file}.${process.pid}.tmp`;
    try {
      fs.writeFileSync(tmp, JSON.stringify({ stamp, entries: Object.assign(read(), cache) }));
      fs.renameSync(tmp, file);
    } catch {
      try {
        fs.unlinkSync(tmp);
      } catch {
        // nothing to remove
      }
    }
  };
  setTimeout(save, 30_000).unref(); // a lane stopped with SIGKILL still leaves what its start learned
  process.on('exit', save);
}
