#pragma once
// GET /: the web page (apps/server/page.html), compiled into the binary so the server needs no
// files and the page no CDN.
#include <string>

namespace fluxrt::server {

const std::string& index_page();

}  // namespace fluxrt::server
