// pages/submit: the spec editor, pre-filled from the example specs (GET /v1/examples).
//
// Decision: the daemon is the only validator (the dashboard does not re-implement the
// spec's rules). Its 400 reply names the field as a path ("sweep.world_size[1]"); the
// editor finds that key's line in the text and pins the message beside it, marks the
// line number, selects the key and links the message to the textarea with
// aria-describedby. Malformed JSON is also the daemon's to judge: its message carries
// the line, which is marked the same way.
import { api, el, errorBox, token, setToken, announce } from '../util.js';

const LINE_PX = 20, PAD_PX = 8;

// The line (1-based) and character range of the key a field path names, or null.
export function locateField(text, field) {
  const keys = String(field).split(/[.[\]]/).filter((s) => s && !/^\d+$/.test(s));
  let from = 0, hit = null;
  for (const k of keys) {
    const re = new RegExp('"' + k.replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + '"\\s*:', 'g');
    re.lastIndex = from;
    const m = re.exec(text);
    if (!m) break;
    hit = { start: m.index, end: m.index + k.length + 2 };
    from = m.index + m[0].length;
  }
  if (!hit) return null;
  return { line: text.slice(0, hit.start).split('\n').length, start: hit.start, end: hit.end };
}

export async function renderSubmit(main, query) {
  let examples = [];
  const ta = el('textarea', { id: 'spec', name: 'spec', spellcheck: 'false', autocomplete: 'off', 'aria-label': 'Experiment spec (JSON)', 'aria-describedby': 'spec-help' });
  const gutter = el('pre', { class: 'gutter', 'aria-hidden': 'true' });
  const pin = el('div', { class: 'field-error', id: 'field-error', hidden: true });
  const editor = el('div', { class: 'editor' }, gutter, ta, pin);
  const summary = el('div', { id: 'submit-error', role: 'alert' });
  const submitBtn = el('button', { type: 'submit', class: 'primary', id: 'submit' }, 'Submit');
  const tokenIn = el('input', { id: 'token', type: 'password', autocomplete: 'off', value: token() });
  const exList = el('ul', { class: 'examples', id: 'examples' });
  let badLine = 0;

  function lines() {
    const n = ta.value.split('\n').length;
    gutter.replaceChildren(...Array.from({ length: n }, (_, i) => el('span', { class: i + 1 === badLine ? 'bad' : null, style: 'display:block' }, String(i + 1))));
    gutter.scrollTop = ta.scrollTop;
    placePin();
  }

  function placePin() {
    if (pin.hidden) return;
    const top = PAD_PX + (badLine - 1) * LINE_PX - ta.scrollTop;
    pin.style.top = Math.max(0, Math.min(ta.clientHeight - LINE_PX, top)) + 'px';
  }

  function clearError() {
    badLine = 0;
    pin.hidden = true;
    pin.removeAttribute('data-field');
    editor.classList.remove('invalid');
    ta.removeAttribute('aria-invalid');
    ta.setAttribute('aria-describedby', 'spec-help');
    summary.replaceChildren();
  }

  // err: an ApiError; pins its message at the named field's line (or the JSON error's).
  function showError(err) {
    const text = ta.value;
    let where = err.field ? locateField(text, err.field) : null;
    const m = /line (\d+)/.exec(err.message);
    if (!where && m && !err.field) where = { line: Number(m[1]) };
    badLine = where ? where.line : 1;
    pin.textContent = (err.field ? err.field + ': ' : '') + err.message.replace(new RegExp('^' + (err.field || '').replace(/[.*+?^${}()|[\]\\]/g, '\\$&') + ':\\s*'), '') +
      (err.field && !where ? ' (the field is not in the text: add it)' : '');
    pin.hidden = false;
    if (err.field) pin.dataset.field = err.field;
    editor.classList.add('invalid');
    ta.setAttribute('aria-invalid', 'true');
    ta.setAttribute('aria-describedby', 'field-error spec-help');
    summary.replaceChildren(el('div', { class: 'error' }, el('strong', {}, `The daemon refused the spec (${err.status} ${err.code})` + (err.field ? `, field ${err.field}` : '') + ': '), err.message));
    lines();
    if (where && where.start !== undefined) {
      ta.focus();
      ta.setSelectionRange(where.start, where.end);
      ta.scrollTop = Math.max(0, (badLine - 5) * LINE_PX);
    }
    placePin();
    announce('Spec refused: ' + err.message);
  }

  function load(ex) {
    clearError();
    ta.value = JSON.stringify(ex.spec, null, 2) + '\n';
    ta.scrollTop = 0;
    lines();
    exList.querySelectorAll('button').forEach((b) => b.setAttribute('aria-pressed', String(b.dataset.name === ex.name)));
  }

  async function submit(ev) {
    ev.preventDefault();
    clearError();
    setToken(tokenIn.value.trim());
    submitBtn.disabled = true;
    try {
      const exp = await api('/v1/experiments', { method: 'POST', body: ta.value });
      announce(`Experiment ${exp.id} submitted`);
      location.hash = `#/experiments/${exp.id}`;
    } catch (e) {
      if (e.status === 400 || e.status === 409) showError(e);
      else summary.replaceChildren(errorBox(e.status === 401 ? 'Not authorized (set the token below)' : 'Submit failed', e));
    } finally {
      submitBtn.disabled = false;
    }
  }

  ta.addEventListener('input', () => { if (!pin.hidden) clearError(); lines(); });
  ta.addEventListener('scroll', () => { gutter.scrollTop = ta.scrollTop; placePin(); });
  ta.addEventListener('keydown', (ev) => {
    if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) submit(ev);
  });

  main.append(el('h1', {}, 'Submit an experiment'),
    el('div', { class: 'editor-grid' },
      el('form', { id: 'submit-form', onsubmit: submit, novalidate: true },
        el('p', { id: 'spec-help', class: 'muted' }, 'Edit the spec (JSON). Any field may be swept under "sweep". The daemon checks it; a refused field is marked beside its line. Ctrl+Enter submits. Fields: ',
          el('a', { href: '/v1/spec/schema', target: '_blank' }, 'spec schema'), '.'),
        summary, editor,
        el('div', { class: 'toolbar' }, submitBtn,
          el('button', { type: 'button', onclick: () => { try { ta.value = JSON.stringify(JSON.parse(ta.value), null, 2) + '\n'; clearError(); lines(); } catch (e) { summary.replaceChildren(errorBox('Not valid JSON', e)); } } }, 'Format'),
          el('div', { class: 'field' }, el('label', { for: 'token' }, 'Token (only if the daemon needs one)'), tokenIn))),
      el('section', { 'aria-labelledby': 'ex-h' }, el('h2', { id: 'ex-h' }, 'Start from an example'), exList)));

  try {
    examples = (await api('/v1/examples')).items;
  } catch (e) {
    exList.replaceWith(errorBox('Cannot load the example specs', e));
  }
  for (const ex of examples) {
    exList.append(el('li', {}, ex.spec
      ? el('button', { type: 'button', 'data-name': ex.name, 'aria-pressed': 'false', onclick: () => load(ex) }, ex.name)
      : el('span', { class: 'run-error' }, `${ex.file}: ${ex.error}`),
      ex.spec && ex.spec.description ? el('p', { class: 'desc' }, ex.spec.description) : null));
  }
  const want = query.get('example');
  const first = examples.find((x) => x.spec && x.name === want) || examples.find((x) => x.spec && x.name === 'allreduce-cpu') || examples.find((x) => x.spec);
  if (first) load(first);
  else { ta.value = '{\n  "workload": "collective"\n}\n'; lines(); }
  return () => {};
}
