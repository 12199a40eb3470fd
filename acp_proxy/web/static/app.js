// acp-proxy inspector: every page is drawn from its JSON twin (the same path + ".json"); the
// other scripts (core, index, conversation_view, timeline, virtual, conversation, diff, and the
// feature scripts) are loaded before this one, which starts the page.
"use strict";

const PAGES = { index: initIndex, conversation: initConversation, diff: initDiff, search: initSearch };
(PAGES[document.body.dataset.page] || (() => {}))();
for (const feature of FEATURES) if (feature.page === document.body.dataset.page) feature.start();
