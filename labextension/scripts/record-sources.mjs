// Records which sources the committed build in prebuilt/ was made from: one `sha256  path` line per source
// (sha256sum's format, paths relative to labextension/, sorted), in prebuilt/SOURCES.sha256. `npm run build`
// writes it after building; tests/notebook/test_labextension.py recomputes it, so a source edited without a rebuild
// fails there. With --check, compares instead of writing and exits 1 on a difference.
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, sep } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const record = join(root, 'prebuilt', 'SOURCES.sha256');

function files(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap(entry =>
    entry.isDirectory() ? files(join(dir, entry.name)) : [join(dir, entry.name)]
  );
}

const sources = ['package.json', 'tsconfig.json', ...files(join(root, 'src')).map(p => relative(root, p))]
  .map(p => p.split(sep).join('/'))
  .sort();
const text = sources
  .map(p => `${createHash('sha256').update(readFileSync(join(root, p))).digest('hex')}  ${p}\n`)
  .join('');

if (process.argv.includes('--check')) {
  let recorded = '';
  try {
    recorded = readFileSync(record, 'utf8');
  } catch {
    // no record: stale
  }
  if (recorded !== text) {
    console.error(`prebuilt/ is stale: rebuild with \`npm run build\` in labextension/\n${text}`);
    process.exit(1);
  }
} else {
  writeFileSync(record, text);
  console.log(`recorded ${sources.length} sources in ${relative(root, record)}`);
}
