// app: the router. The URL's hash names the page (#/experiments, #/submit,
// #/experiments/ID, #/compare?e=1,2&r=5, #/nodes); each page module renders into <main> and
// returns a cleanup function that closes its event streams and timers.
//
// Decision: hash routes, so the daemon serves one file for every page and a reload or a
// bookmark lands on the same view. After a navigation, focus moves to the page's
// heading so keyboard and screen-reader users start at the new content.
import { api, el, errorBox } from './util.js';
import { renderList } from './pages/list.js';
import { renderSubmit } from './pages/submit.js';
import { renderExperiment } from './pages/experiment.js';
import { renderCompare } from './pages/compare.js';
import { renderNodes } from './pages/nodes.js';

let cleanup = null;

function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [path, query] = h.split('?');
  return { parts: path.split('/').filter(Boolean), query: new URLSearchParams(query || '') };
}

async function route() {
  if (cleanup) { try { cleanup(); } catch (_) { /* a page's cleanup must not stop the next */ } cleanup = null; }
  const { parts, query } = parseHash();
  const main = document.getElementById('main');
  main.replaceChildren();
  let page = parts[0] || 'experiments';
  document.querySelectorAll('[data-nav]').forEach((a) => {
    if (a.dataset.nav === page && parts.length <= 1) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  });
  try {
    if (page === 'experiments' && parts[1]) cleanup = await renderExperiment(main, Number(parts[1]), query);
    else if (page === 'experiments') cleanup = await renderList(main, query);
    else if (page === 'submit') cleanup = await renderSubmit(main, query);
    else if (page === 'compare') cleanup = await renderCompare(main, query);
    else if (page === 'nodes') cleanup = await renderNodes(main);
    else main.append(el('h1', {}, 'Not found'), el('p', {}, 'No page ' + location.hash + '. ', el('a', { href: '#/experiments' }, 'Experiments')));
  } catch (e) {
    main.append(errorBox('This page could not be shown', e));
  }
  const h1 = main.querySelector('h1');
  if (h1 && document.activeElement === document.body) { h1.tabIndex = -1; h1.focus({ preventScroll: true }); }
  document.title = (h1 ? h1.textContent + ' — ' : '') + 'ddpbench';
}

async function health() {
  const p = document.getElementById('health');
  try {
    const h = await api('/healthz');
    p.textContent = `${h.node} · ddpbenchd ${h.version} · ${h.slots.free}/${h.slots.total} slots free · ${h.runs.queued} queued, ${h.runs.active} active`;
  } catch (e) {
    p.textContent = 'ddpbenchd is not answering';
  }
}

window.addEventListener('hashchange', () => { document.activeElement && document.activeElement.blur && document.activeElement.blur(); route(); });
route();
health();
setInterval(health, 10000);
