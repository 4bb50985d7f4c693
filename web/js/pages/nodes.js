// pages/nodes: the cluster's nodes (GET /v1/nodes): role, state, slots, GPUs, network
// profile, engines and how long ago each follower last synced.
//
// Decision: the page polls every 3 s while it is shown. Nodes have no event stream (a
// follower's heartbeat is a sync several times a second; publishing each would flood
// every SSE client), and a lost node becomes lost on the leader's clock anyway, so a
// few seconds of lag is what the state itself has. The timer stops when the page goes.
import { api, el, fmtAge, errorBox, statusBadge, downloadButtons } from '../util.js';

const COLUMNS = ['name', 'role', 'state', 'address', 'slots_used', 'cpu_slots', 'gpus', 'network_profile', 'engines', 'heartbeat_age_s', 'runs'];

function engines(e) {
  return e && Object.keys(e).length ? Object.entries(e).map(([k, v]) => v ? `${k} ${v}` : k).join(', ') : '—';
}

function nodeRow(n) {
  return el('tr', { 'data-node': n.name, 'data-state': n.state },
    el('th', { scope: 'row' }, n.name),
    el('td', {}, n.role),
    el('td', {}, statusBadge(n.state)),
    el('td', {}, n.address),
    el('td', { class: 'num', 'data-col': 'slots' }, `${n.slots_used}/${n.cpu_slots}`),
    el('td', { class: 'num' }, n.gpus),
    el('td', {}, n.network_profile || 'host'),
    el('td', {}, engines(n.engines)),
    el('td', { class: 'num', title: n.last_heartbeat_at || '' },
      n.heartbeat_age_s === null || n.heartbeat_age_s === undefined ? (n.role === 'leader' ? 'this node' : '—') : `${n.heartbeat_age_s.toFixed(1)} s ago`),
    el('td', { class: 'num' }, n.runs));
}

export async function renderNodes(main) {
  let nodes = [];
  const box = el('div', { id: 'nodes' });
  const count = el('p', { class: 'muted', id: 'nodes-count', 'aria-live': 'polite' });
  const shown = () => ({ name: 'nodes', columns: COLUMNS, rows: nodes, json: nodes });
  main.append(el('h1', {}, 'Nodes'),
    el('p', { class: 'muted' }, 'The leader and the followers that joined it (ddpbenchd --join). up: syncing; draining: finishing its ranks, taking no new ones; lost: silent past the timeout; left: drained and gone.'),
    el('div', { class: 'toolbar' }, downloadButtons(shown)), count, box);

  async function load() {
    try {
      nodes = (await api('/v1/nodes')).nodes;
    } catch (e) {
      box.replaceChildren(errorBox('Cannot read the nodes', e));
      return;
    }
    const up = nodes.filter((n) => n.state === 'up').length;
    count.textContent = `${up} of ${nodes.length} node${nodes.length === 1 ? '' : 's'} up · refreshed ${fmtAge(new Date().toISOString())}`;
    box.replaceChildren(el('div', { class: 'table-wrap' }, el('table', { class: 'data', id: 'nodes-table' },
      el('caption', {}, 'Nodes of the cluster'),
      el('thead', {}, el('tr', {}, ['Node', 'Role', 'State', 'Address', 'Slots used', 'GPUs', 'Network', 'Engines', 'Last sync', 'Runs'].map((h) => el('th', { scope: 'col' }, h)))),
      el('tbody', {}, nodes.map(nodeRow)))));
  }
  await load();
  const timer = setInterval(load, 3000);
  return () => clearInterval(timer);
}
