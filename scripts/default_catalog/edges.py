"""Labelled data-flow edges: (source, target) = target consumes something the source returns.

References are "<tool>/<api>"; build.py expands them to full ids.
"""

KG, PG = "KeyGate Identity", "PeopleGraph Directory"
FL, HO, CA = "SkyRoute Flights", "StayFinder Hotels", "RideNow Car Rental"
PAY, STK = "LedgerPay Payments", "MarketPulse Stocks"
SKY = "SkyCast Weather"
MD, PB, CH, SMS = "MailDrop Email", "PostBox Mail", "ChatterBox Messaging", "TextLine SMS"
SHOP, GRO = "ShopCart Store", "FreshBasket Grocery"
DRV, TSK, CAL, NOT = "CloudVault Drive", "TaskFlow Tasks", "PlanIt Calendar", "NoteNest Notes"
MUS, MOV, IMG = "TuneStream Music", "ReelBase Movies", "PixelForge Images"
GIT, CI = "CodeHub Repos", "BuildBot CI"
DOC = "MediBook Appointments"
MAP, SPO, NEWS, LB = "WayFinder Maps", "ScoreBoard Live", "NewsWire", "LinguaBridge Translate"


def _fan(tool_a, src, tool_b, targets):
    return [(f"{tool_a}/{src}", f"{tool_b}/{t}") for t in targets]


EDGES = []
# Identity: login -> access_token; reset and 2FA flows.
EDGES += _fan(KG, "login", KG, ["logout", "get_profile", "update_email", "change_password", "enable_two_factor",
                                  "verify_two_factor", "refresh_token"])
EDGES += _fan(KG, "enable_two_factor", KG, ["verify_two_factor"])
EDGES += _fan(KG, "request_password_reset", KG, ["reset_password"])
EDGES += _fan(KG, "login", PG, ["search_users", "get_user", "create_user", "assign_role", "deactivate_user",
                                  "list_groups", "add_user_to_group"])
EDGES += _fan(PG, "search_users", PG, ["get_user", "assign_role", "deactivate_user", "add_user_to_group"])
EDGES += _fan(PG, "create_user", PG, ["assign_role", "add_user_to_group"])
EDGES += _fan(PG, "list_groups", PG, ["add_user_to_group"])
EDGES += _fan(PG, "search_users", TSK, ["assign_task"])
EDGES += _fan(PG, "create_user", TSK, ["assign_task"])
# Travel.
EDGES += _fan(FL, "search_flights", FL, ["get_flight_details", "book_flight"])
EDGES += _fan(FL, "book_flight", FL, ["get_booking", "cancel_booking", "select_seat", "check_in"])
EDGES += _fan(FL, "check_in", FL, ["get_boarding_pass"])
EDGES += _fan(HO, "search_hotels", HO, ["get_hotel", "check_availability", "list_reviews"])
EDGES += _fan(HO, "check_availability", HO, ["reserve_room"])
EDGES += _fan(HO, "reserve_room", HO, ["get_reservation", "cancel_reservation"])
EDGES += _fan(HO, "get_hotel", MAP, ["nearby_search", "traffic_conditions"])
EDGES += _fan(CA, "search_cars", CA, ["reserve_car"])
EDGES += _fan(CA, "reserve_car", CA, ["extend_rental", "cancel_rental"])
# Finance.
EDGES += _fan(PAY, "create_customer", PAY, ["attach_payment_method", "create_payment_intent"])
EDGES += _fan(PAY, "create_payment_intent", PAY, ["confirm_payment"])
EDGES += _fan(PAY, "attach_payment_method", PAY, ["confirm_payment"])
EDGES += _fan(PAY, "confirm_payment", PAY, ["refund_payment"])
EDGES += _fan(PAY, "attach_payment_method", SHOP, ["checkout"])
EDGES += _fan(STK, "search_symbol", STK, ["get_quote", "get_price_history", "company_profile", "get_dividends", "get_earnings"])
# Communication.
EDGES += _fan(MD, "list_inbox", MD, ["read_message", "reply_to_message", "delete_message"])
EDGES += _fan(MD, "search_messages", MD, ["read_message", "reply_to_message", "delete_message"])
EDGES += _fan(MD, "create_draft", MD, ["send_draft"])
EDGES += _fan(PB, "fetch_mailbox", PB, ["open_mail", "forward_mail", "file_mail"])
EDGES += _fan(CH, "list_channels", CH, ["post_message", "channel_history", "invite_to_channel"])
EDGES += _fan(CH, "create_channel", CH, ["post_message", "invite_to_channel"])
EDGES += _fan(CH, "post_message", CH, ["add_reaction"])
EDGES += _fan(SMS, "send_sms", SMS, ["sms_status"])
EDGES += _fan(SMS, "send_verification_code", SMS, ["check_verification_code"])
# E-commerce.
EDGES += _fan(SHOP, "search_products", SHOP, ["get_product", "add_item"])
EDGES += _fan(SHOP, "create_cart", SHOP, ["add_item", "remove_item", "view_cart", "apply_coupon", "checkout"])
EDGES += _fan(SHOP, "checkout", SHOP, ["track_order", "cancel_order", "request_return"])
EDGES += _fan(SHOP, "list_orders", SHOP, ["track_order", "cancel_order", "request_return"])
EDGES += _fan(GRO, "find_stores", GRO, ["search_groceries", "list_delivery_slots", "place_grocery_order", "reorder_favourites"])
EDGES += _fan(GRO, "list_delivery_slots", GRO, ["place_grocery_order", "reorder_favourites"])
EDGES += _fan(GRO, "search_groceries", GRO, ["place_grocery_order"])
EDGES += _fan(GRO, "place_grocery_order", GRO, ["grocery_order_status"])
# Productivity.
EDGES += _fan(DRV, "upload_file", DRV, ["share_file", "download_file", "move_file", "delete_file", "list_versions"])
EDGES += _fan(DRV, "list_files", DRV, ["share_file", "download_file", "move_file", "delete_file"])
EDGES += _fan(DRV, "create_folder", DRV, ["upload_file", "move_file", "list_files"])
EDGES += _fan(TSK, "create_project", TSK, ["create_task", "list_tasks"])
EDGES += _fan(TSK, "list_projects", TSK, ["create_task", "list_tasks"])
EDGES += _fan(TSK, "create_task", TSK, ["assign_task", "update_task_status", "add_task_comment"])
EDGES += _fan(TSK, "list_tasks", TSK, ["assign_task", "update_task_status", "add_task_comment"])
EDGES += _fan(CAL, "find_free_slot", CAL, ["create_event"])
EDGES += _fan(CAL, "create_event", CAL, ["update_event", "invite_attendees", "set_reminder"])
EDGES += _fan(CAL, "list_events", CAL, ["update_event", "delete_event", "respond_to_invite", "invite_attendees"])
EDGES += _fan(NOT, "create_note", NOT, ["update_note", "tag_note"])
EDGES += _fan(NOT, "search_notes", NOT, ["update_note", "tag_note", "delete_note"])
# Media.
EDGES += _fan(MUS, "search_tracks", MUS, ["play_track", "add_to_playlist", "get_lyrics"])
EDGES += _fan(MUS, "create_playlist", MUS, ["add_to_playlist"])
EDGES += _fan(MOV, "search_movies", MOV, ["get_movie_details", "get_cast", "where_to_watch", "similar_titles", "get_trailer"])
EDGES += _fan(MOV, "trending_titles", MOV, ["get_movie_details", "where_to_watch"])
EDGES += _fan(IMG, "upload_image", IMG, ["resize_image", "crop_image", "apply_filter", "remove_background", "convert_format"])
# Developer tools.
EDGES += _fan(GIT, "create_repo", GIT, ["create_branch", "create_issue"])
EDGES += _fan(GIT, "create_issue", GIT, ["comment_on_issue", "close_issue"])
EDGES += _fan(GIT, "list_issues", GIT, ["comment_on_issue", "close_issue"])
EDGES += _fan(GIT, "create_pull_request", GIT, ["merge_pull_request"])
EDGES += _fan(GIT, "merge_pull_request", GIT, ["create_release"])
EDGES += _fan(GIT, "merge_pull_request", CI, ["trigger_build"])
EDGES += _fan(CI, "list_pipelines", CI, ["trigger_build"])
EDGES += _fan(CI, "trigger_build", CI, ["get_build_status", "get_build_logs", "cancel_build", "list_artifacts", "deploy_build"])
EDGES += _fan(CI, "deploy_build", CI, ["rollback_deployment"])
# Health.
EDGES += _fan(DOC, "search_doctors", DOC, ["get_doctor", "list_available_slots"])
EDGES += _fan(DOC, "list_available_slots", DOC, ["book_appointment", "reschedule_appointment"])
EDGES += _fan(DOC, "book_appointment", DOC, ["reschedule_appointment", "cancel_appointment"])
EDGES += _fan(DOC, "list_my_appointments", DOC, ["reschedule_appointment", "cancel_appointment"])
# Maps -> weather and places.
EDGES += _fan(MAP, "geocode_address", MAP, ["nearby_search", "traffic_conditions", "reverse_geocode"])
EDGES += _fan(MAP, "geocode_address", SKY, ["current_weather", "forecast_daily", "forecast_hourly", "air_quality",
                                            "weather_alerts", "uv_index", "historical_weather"])
EDGES += _fan(MAP, "search_places", MAP, ["place_details"])
EDGES += _fan(MAP, "nearby_search", MAP, ["place_details"])
# Sports, news, language.
EDGES += _fan(SPO, "list_leagues", SPO, ["league_standings", "live_scores"])
EDGES += _fan(SPO, "search_team", SPO, ["team_fixtures", "head_to_head"])
EDGES += _fan(SPO, "live_scores", SPO, ["match_details"])
EDGES += _fan(SPO, "team_fixtures", SPO, ["match_details"])
EDGES += _fan(NEWS, "top_headlines", NEWS, ["get_article", "summarize_article"])
EDGES += _fan(NEWS, "search_articles", NEWS, ["get_article", "summarize_article"])
EDGES += _fan(LB, "upload_document", LB, ["translate_document"])
EDGES += _fan(LB, "translate_document", LB, ["get_translation_job"])
EDGES += _fan(LB, "detect_language", LB, ["translate_text"])
EDGES += _fan(LB, "create_glossary", LB, ["translate_text"])
# Cross-tool flows used by the multi-tool queries.
EDGES += _fan(DOC, "list_my_appointments", CAL, ["create_event"])
EDGES += _fan(SPO, "team_fixtures", CAL, ["create_event"])
EDGES += _fan(NEWS, "get_article", LB, ["translate_text"])
EDGES += _fan(KG, "get_profile", NEWS, ["create_topic_alert"])
EDGES += _fan(KG, "get_profile", SMS, ["send_sms", "send_verification_code"])
# Further genuine flows (alternative producers of the same value).
EDGES += _fan(KG, "refresh_token", KG, ["logout", "get_profile", "update_email", "change_password"])
EDGES += _fan(PG, "create_user", PG, ["get_user", "deactivate_user"])
EDGES += _fan(CH, "create_channel", CH, ["channel_history"])
EDGES += _fan(GIT, "list_repos", GIT, ["create_branch", "create_issue", "list_issues", "create_pull_request"])
EDGES += _fan(GIT, "create_repo", GIT, ["create_pull_request"])
EDGES += _fan(STK, "market_movers", STK, ["get_quote", "company_profile", "get_price_history"])
EDGES += _fan(DOC, "list_my_appointments", DOC, ["get_doctor"])
EDGES += _fan(MOV, "similar_titles", MOV, ["get_movie_details", "where_to_watch"])
EDGES += _fan(MOV, "trending_titles", MOV, ["get_cast", "get_trailer"])
EDGES += _fan(MUS, "get_recommendations", MUS, ["play_track", "add_to_playlist"])
EDGES += _fan(MUS, "recently_played", MUS, ["play_track"])
EDGES += _fan(DRV, "list_files", DRV, ["list_versions"])
EDGES += _fan(NOT, "create_note", NOT, ["delete_note"])
EDGES += _fan(CAL, "create_event", CAL, ["delete_event"])
EDGES += _fan(CAL, "list_events", CAL, ["set_reminder"])
EDGES += _fan(SPO, "league_standings", SPO, ["team_fixtures", "head_to_head"])
EDGES += _fan(SPO, "search_team", SPO, ["league_standings"])
EDGES += _fan(FL, "get_booking", FL, ["get_flight_details"])
EDGES += _fan(HO, "get_hotel", SKY, ["current_weather", "forecast_daily"])
EDGES += _fan(HO, "get_reservation", HO, ["get_hotel", "list_reviews"])
EDGES += _fan(GRO, "reorder_favourites", GRO, ["grocery_order_status"])
EDGES += _fan(SHOP, "view_cart", SHOP, ["remove_item"])
