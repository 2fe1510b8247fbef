// GET /: the web page (page.html, compiled in by page.cpp.in). It loads nothing from elsewhere and
// needs no key to load; it asks for one when the server has one.
#include "page.h"
#include "routes.h"

namespace fluxrt::server {

void add_page_route(RouteTable& routes) {
  routes.add("GET", "/", [](const RouteCall&, HttpResponse& res) {
    set_content(res, index_page(), "text/html; charset=utf-8");
  });
}

}  // namespace fluxrt::server
